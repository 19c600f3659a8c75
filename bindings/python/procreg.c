/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * procreg.c - the CPython module procreg: libprocreg for Python.
 *
 * Every call goes through the library: lookups and walks read the shared
 * table with its reader protocol, writes go to procregd through it. This
 * file only turns Python objects into C arguments and results back.
 *
 * The GIL. Calls that may block (anything that talks to the daemon, and
 * the waits on the change feed) run with the GIL released, so other
 * threads go on meanwhile. A lookup keeps it: it is a few memory reads and
 * never waits for anything, and releasing and taking the GIL again would
 * cost more than the lookup itself. Walks (members, groups, entries) keep
 * it too: their callbacks build Python objects.
 *
 * A handle released while another thread is inside one of its blocking
 * calls would be freed under that thread: Registry.busy counts such calls
 * (changed under the GIL only), and close() refuses while it is not 0.
 *
 * The hit path of lookup() allocates one object, the Entry it returns:
 * the metadata is kept inline in it (a bytes object is made only when
 * .metadata is read), its integers stay C integers until read, and its
 * name is the object the caller passed in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structseq.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <procreg.h>

static PyObject *Error, *NameTaken, *NotFound, *PermissionDenied, *InvalidArgument, *Timeout,
	*Overflow, *QuotaExceeded;

/* ==== errors ============================================================ */

static PyObject *class_of(int err)
{
	switch (err) {
	case -EEXIST:
		return NameTaken;
	case -ENOENT:
		return NotFound;
	case -EPERM:
	case -EACCES:
		return PermissionDenied;
	case -EINVAL:
	case -ENAMETOOLONG:
	case -EMSGSIZE:
		return InvalidArgument;
	case -ETIMEDOUT:
		return Timeout;
	case -EOVERFLOW:
		return Overflow;
	case -EDQUOT:
		return QuotaExceeded;
	default:
		return Error;
	}
}

/* Raise the exception for negative errno ERR, naming WHAT (may be NULL):
 * the class says what happened, .errno and .strerror the library's code
 * and message, .filename the name it was about. */
static PyObject *raise_err(int err, PyObject *what)
{
	PyObject *cls = class_of(err), *exc;

	if (what)
		exc = PyObject_CallFunction(cls, "isO", -err, procreg_strerror(err), what);
	else
		exc = PyObject_CallFunction(cls, "is", -err, procreg_strerror(err));
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* ==== arguments ========================================================= */

/* A name (str or bytes) as a C string in *S, valid while *HOLD (to be
 * released with Py_XDECREF) and the argument live. A str goes as UTF-8,
 * with lone surrogates (undecodable bytes, as os.fsdecode() gives them)
 * back to the bytes they stand for, so that every name read from the
 * library can be passed back. 0, or -1 with an exception set. */
static int name_arg(PyObject *o, const char **s, PyObject **hold)
{
	Py_ssize_t len;

	*hold = NULL;
	if (PyUnicode_Check(o)) {
		*s = PyUnicode_AsUTF8AndSize(o, &len);
		if (!*s) {
			if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
				return -1;
			PyErr_Clear();
			*hold = PyUnicode_AsEncodedString(o, "utf-8", "surrogateescape");
			if (!*hold)
				return -1;
			*s = PyBytes_AS_STRING(*hold);
			len = PyBytes_GET_SIZE(*hold);
		}
	} else if (PyBytes_Check(o)) {
		*s = PyBytes_AS_STRING(o);
		len = PyBytes_GET_SIZE(o);
	} else {
		PyErr_Format(PyExc_TypeError, "a name is str or bytes, not %.100s",
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	/* The library takes C strings: a NUL inside would cut the name. */
	if (strlen(*s) != (size_t)len) {
		Py_CLEAR(*hold);
		raise_err(-EINVAL, o);
		return -1;
	}
	return 0;
}

/* Metadata: bytes-like, or str (as UTF-8); None is empty. Release with
 * PyBuffer_Release(). 0, or -1 with an exception set. */
static int meta_arg(PyObject *o, Py_buffer *b)
{
	if (!o || o == Py_None)
		return PyBuffer_FillInfo(b, NULL, "", 0, 1, PyBUF_SIMPLE);
	if (PyUnicode_Check(o)) {
		Py_ssize_t len;
		const char *s = PyUnicode_AsUTF8AndSize(o, &len);

		return s ? PyBuffer_FillInfo(b, o, (void *)s, len, 1, PyBUF_SIMPLE) : -1;
	}
	return PyObject_GetBuffer(o, b, PyBUF_SIMPLE);
}

/* A timeout in seconds (None: no limit) as milliseconds for the library,
 * rounded up so that a wait never ends early. 0, or -1 with an exception
 * set. */
static int timeout_arg(PyObject *o, int *ms)
{
	double t;

	if (!o || o == Py_None) {
		*ms = -1;
		return 0;
	}
	t = PyFloat_AsDouble(o);
	if (t == -1.0 && PyErr_Occurred())
		return -1;
	if (!(t >= 0)) {
		PyErr_SetString(PyExc_ValueError, "timeout must be non-negative or None");
		return -1;
	}
	*ms = t * 1000 >= INT_MAX ? INT_MAX : (int)(t * 1000 + 0.999999);
	return 0;
}

static PyObject *decode(const char *s)
{
	return PyUnicode_DecodeUTF8(s, strlen(s), "surrogateescape");
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ==== Entry ============================================================= */

typedef struct {
	PyObject_VAR_HEAD /* ob_size: the metadata's length */
	PyObject *name;
	pid_t pid;
	uint32_t node;
	uint32_t uid;
	uint32_t flags;
	uint64_t start_time;
	uint64_t registered_ns;
	char meta[1];
} EntryObject;

static PyTypeObject EntryType;

/* An Entry for E (its metadata at META), named NAME (a new reference is
 * taken). */
static PyObject *entry_new(const struct procreg_entry *e, const char *meta, PyObject *name)
{
	EntryObject *o = PyObject_NewVar(EntryObject, &EntryType, (Py_ssize_t)e->meta_len);

	if (!o)
		return NULL;
	Py_INCREF(name);
	o->name = name;
	o->pid = e->pid;
	o->node = e->node;
	o->uid = e->uid;
	o->flags = e->flags;
	o->start_time = e->start_time;
	o->registered_ns = e->registered_ns;
	memcpy(o->meta, meta, e->meta_len);
	return (PyObject *)o;
}

static void entry_dealloc(EntryObject *o)
{
	Py_XDECREF(o->name);
	Py_TYPE(o)->tp_free(o);
}

static PyObject *entry_name(EntryObject *o, void *c)
{
	(void)c;
	Py_INCREF(o->name);
	return o->name;
}

static PyObject *entry_metadata(EntryObject *o, void *c)
{
	(void)c;
	return PyBytes_FromStringAndSize(o->meta, Py_SIZE(o));
}

#define ENTRY_INT(field, conv)                                   \
	static PyObject *entry_##field(EntryObject *o, void *c) \
	{                                                        \
		(void)c;                                         \
		return conv(o->field);                           \
	}
ENTRY_INT(pid, PyLong_FromLong)
ENTRY_INT(node, PyLong_FromUnsignedLong)
ENTRY_INT(uid, PyLong_FromUnsignedLong)
ENTRY_INT(flags, PyLong_FromUnsignedLong)
ENTRY_INT(start_time, PyLong_FromUnsignedLongLong)
ENTRY_INT(registered_ns, PyLong_FromUnsignedLongLong)

static PyGetSetDef entry_getset[] = {
	{ "name", (getter)entry_name, NULL, "the name (for a membership: the group)", NULL },
	{ "pid", (getter)entry_pid, NULL, "the owner's pid, on its node", NULL },
	{ "node", (getter)entry_node, NULL, "the owner's node: 0 for this host", NULL },
	{ "uid", (getter)entry_uid, NULL, "the owner's uid", NULL },
	{ "flags", (getter)entry_flags, NULL, "ENTRY_REPLACEABLE | ENTRY_LEASED | ENTRY_UNHEALTHY",
	  NULL },
	{ "metadata", (getter)entry_metadata, NULL, "the metadata, bytes", NULL },
	{ "start_time", (getter)entry_start_time, NULL,
	  "the owner's start time, clock ticks since boot", NULL },
	{ "registered_ns", (getter)entry_registered_ns, NULL,
	  "when it was registered, CLOCK_REALTIME nanoseconds", NULL },
	{ NULL },
};

static PyObject *entry_repr(EntryObject *o)
{
	PyObject *meta = entry_metadata(o, NULL), *r;

	if (!meta)
		return NULL;
	r = PyUnicode_FromFormat("procreg.Entry(name=%R, pid=%d, node=%u, uid=%u, metadata=%R)",
				 o->name, (int)o->pid, (unsigned)o->node, (unsigned)o->uid, meta);
	Py_DECREF(meta);
	return r;
}

static PyTypeObject EntryType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "procreg.Entry",
	.tp_doc = "A registered name or a group membership, copied out of the table.",
	.tp_basicsize = offsetof(EntryObject, meta),
	.tp_itemsize = 1,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)entry_dealloc,
	.tp_repr = (reprfunc)entry_repr,
	.tp_getset = entry_getset,
};

/* ==== Event and Group =================================================== */

static PyTypeObject EventType, GroupType;

static PyStructSequence_Field event_fields[] = {
	{ "seq", "1, 2, 3... in the order of the writes" },
	{ "time_ns", "CLOCK_REALTIME nanoseconds" },
	{ "type", "EV_REGISTERED, EV_UNREGISTERED, ..." },
	{ "is_group", "name is a group" },
	{ "pid", "the process" },
	{ "node", "its node: 0 for this host" },
	{ "uid", "its uid" },
	{ "start_time", "its start time, clock ticks since boot" },
	{ "name", "the name or the group" },
	{ NULL },
};

static PyStructSequence_Desc event_desc = {
	"procreg.Event", "A change to the registry, from the change feed.", event_fields, 9,
};

static PyStructSequence_Field group_fields[] = {
	{ "name", "the group" },
	{ "members", "its members" },
	{ "local_members", "of them, those on this host" },
	{ NULL },
};

static PyStructSequence_Desc group_desc = {
	"procreg.Group", "A group and its member counts.", group_fields, 3,
};

static PyObject *event_new(const struct procreg_event *ev)
{
	PyObject *o = PyStructSequence_New(&EventType);
	PyObject *v[9];

	if (!o)
		return NULL;
	v[0] = PyLong_FromUnsignedLongLong(ev->seq);
	v[1] = PyLong_FromUnsignedLongLong(ev->time_ns);
	v[2] = PyLong_FromLong(ev->type);
	v[3] = PyBool_FromLong(ev->is_group);
	v[4] = PyLong_FromLong(ev->pid);
	v[5] = PyLong_FromUnsignedLong(ev->node);
	v[6] = PyLong_FromUnsignedLong(ev->uid);
	v[7] = PyLong_FromUnsignedLongLong(ev->start_time);
	v[8] = decode(ev->name);
	for (int i = 0; i < 9; i++) {
		if (!v[i]) {
			for (int j = i + 1; j < 9; j++)
				Py_XDECREF(v[j]);
			Py_DECREF(o);
			return NULL;
		}
		PyStructSequence_SET_ITEM(o, i, v[i]);
	}
	return o;
}

/* ==== Registry ========================================================== */

typedef struct {
	PyObject_HEAD
	procreg_t *reg;
	long busy; /* calls running with the GIL released */
} RegistryObject;

static PyTypeObject RegistryType;

static int check_open(RegistryObject *self)
{
	if (self->reg)
		return 0;
	PyErr_SetString(PyExc_ValueError, "I/O operation on a closed procreg.Registry");
	return -1;
}

/* Run STMT with the GIL released, the handle counted busy meanwhile. */
#define UNLOCKED(self, stmt)            \
	do {                            \
		(self)->busy++;         \
		Py_BEGIN_ALLOW_THREADS  \
		stmt;                   \
		Py_END_ALLOW_THREADS    \
		(self)->busy--;         \
	} while (0)

static int registry_init(RegistryObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "scope", "dir", NULL };
	const char *scope = NULL, *dir = NULL;
	PROCREG_OPTS(procreg_opts, o);
	procreg_t *reg;
	int err = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$z:Registry", kwlist, &scope, &dir))
		return -1;
	if (self->reg) {
		PyErr_SetString(PyExc_RuntimeError, "procreg.Registry is already open");
		return -1;
	}
	o.scope = scope;
	o.dir = dir;
	Py_BEGIN_ALLOW_THREADS
	reg = procreg_open(&o);
	if (!reg)
		err = -errno;
	Py_END_ALLOW_THREADS
	if (!reg) {
		PyObject *what = PyUnicode_FromFormat("%s/procreg.%s", dir ? dir : "$PROCREG_DIR",
						      scope ? scope : "$PROCREG_SCOPE");

		raise_err(err, what);
		Py_XDECREF(what);
		return -1;
	}
	self->reg = reg;
	return 0;
}

static void registry_dealloc(RegistryObject *self)
{
	/* No call can be running: each holds a reference to self. */
	if (self->reg)
		procreg_close(self->reg);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *registry_close(RegistryObject *self, PyObject *unused)
{
	(void)unused;
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError,
				"procreg.Registry.close(): another thread is inside a call on it");
		return NULL;
	}
	if (self->reg) {
		procreg_close(self->reg);
		self->reg = NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *registry_enter(RegistryObject *self, PyObject *unused)
{
	(void)unused;
	if (check_open(self))
		return NULL;
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *registry_exit(RegistryObject *self, PyObject *args)
{
	(void)args;
	return registry_close(self, NULL);
}

static PyObject *registry_closed(RegistryObject *self, void *c)
{
	(void)c;
	return PyBool_FromLong(!self->reg);
}

static PyObject *registry_lookup(RegistryObject *self, PyObject *name)
{
	char buf[PROCREG_META_MAX], *meta = buf, *big = NULL;
	/* Not PROCREG_OPTS(): zeroing the ~300 bytes that a hit fills
	 * anyway is a measurable part of a lookup's cost. */
	struct procreg_entry e;
	PyObject *hold, *r = NULL;
	const char *s;
	int err;

	if (check_open(self) || name_arg(name, &s, &hold))
		return NULL;
	e.sz = sizeof(e);
	e.meta = buf;
	e.meta_size = sizeof(buf);
	err = procreg_lookup(self->reg, s, &e);
	/* A table made with a larger metadata limit than this build's:
	 * ask again with room for it. */
	while (!err && e.meta_len > e.meta_size) {
		char *more = PyMem_Realloc(big, e.meta_len);

		if (!more) {
			PyErr_NoMemory();
			goto out;
		}
		meta = big = more;
		e.meta = big;
		e.meta_size = e.meta_len;
		err = procreg_lookup(self->reg, s, &e);
	}
	if (!err)
		r = entry_new(&e, meta, name);
	else if (err == -ENOENT)
		r = Py_NewRef(Py_None);
	else
		raise_err(err, name);
out:
	PyMem_Free(big);
	Py_XDECREF(hold);
	return r;
}

/* Names per procreg_lookup_many() call. */
#define MANY 32

static PyObject *registry_lookup_many(RegistryObject *self, PyObject *names)
{
	PyObject *seq, *list = NULL, *hold[MANY];
	struct procreg_entry *e = NULL;
	const char *s[MANY];
	char *meta = NULL;
	int res[MANY];
	Py_ssize_t n;

	if (check_open(self))
		return NULL;
	seq = PySequence_Fast(names, "lookup_many() takes an iterable of names");
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	list = PyList_New(n);
	e = PyMem_Malloc(MANY * sizeof(*e));
	meta = PyMem_Malloc(MANY * PROCREG_META_MAX);
	if (!list || !e || !meta) {
		if (list)
			PyErr_NoMemory();
		goto fail;
	}
	for (Py_ssize_t base = 0; base < n; base += MANY) {
		Py_ssize_t m = n - base < MANY ? n - base : MANY, i;
		PyObject **items = PySequence_Fast_ITEMS(seq) + base;
		int k = 0;

		for (i = 0; i < m; i++) {
			if (name_arg(items[i], &s[i], &hold[i]))
				break;
			e[i].sz = sizeof(e[i]);
			e[i].meta = meta + i * PROCREG_META_MAX;
			e[i].meta_size = PROCREG_META_MAX;
		}
		if (i == m)
			k = procreg_lookup_many(self->reg, s, (size_t)m, e, res);
		for (Py_ssize_t j = 0; j < i; j++)
			Py_XDECREF(hold[j]);
		if (i < m)
			goto fail;
		if (k < 0) {
			raise_err(k, NULL);
			goto fail;
		}
		for (i = 0; i < m; i++) {
			PyObject *r;

			if (res[i] == -ENOENT)
				r = Py_NewRef(Py_None);
			else if (res[i])
				r = raise_err(res[i], items[i]);
			else if (e[i].meta_len > e[i].meta_size)
				/* A table with a larger metadata limit than
				 * this build's: this one on its own. */
				r = registry_lookup(self, items[i]);
			else
				r = entry_new(&e[i], e[i].meta, items[i]);
			if (!r)
				goto fail;
			PyList_SET_ITEM(list, base + i, r);
		}
	}
	PyMem_Free(e);
	PyMem_Free(meta);
	Py_DECREF(seq);
	return list;
fail:
	PyMem_Free(e);
	PyMem_Free(meta);
	Py_XDECREF(list);
	Py_DECREF(seq);
	return NULL;
}

static int registry_contains(RegistryObject *self, PyObject *name)
{
	PyObject *hold;
	const char *s;
	int err;

	if (check_open(self) || name_arg(name, &s, &hold))
		return -1;
	err = procreg_lookup(self->reg, s, NULL);
	Py_XDECREF(hold);
	if (err == -ENOENT)
		return 0;
	if (err) {
		raise_err(err, name);
		return -1;
	}
	return 1;
}

static PyObject *registry_register(RegistryObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "metadata", "queue", "replaceable", "replace", "lease_ms",
				  NULL };
	PyObject *name, *metadata = NULL, *hold;
	int queue = 0, replaceable = 0, replace = 0, err;
	unsigned int lease_ms = 0;
	PROCREG_OPTS(procreg_register_opts, o);
	const char *s;
	Py_buffer b;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$pppI:register", kwlist, &name, &metadata,
					 &queue, &replaceable, &replace, &lease_ms))
		return NULL;
	if (check_open(self) || name_arg(name, &s, &hold))
		return NULL;
	if (meta_arg(metadata, &b)) {
		Py_XDECREF(hold);
		return NULL;
	}
	o.flags = (queue ? PROCREG_QUEUE : 0) | (replaceable ? PROCREG_REPLACEABLE : 0) |
		  (replace ? PROCREG_REPLACE : 0);
	o.lease_ms = lease_ms;
	UNLOCKED(self, err = procreg_register_opts(self->reg, s, b.buf, b.len, &o));
	PyBuffer_Release(&b);
	Py_XDECREF(hold);
	/* In line behind the owner (queue=True): not an error, but not ours. */
	if (err == -EINPROGRESS)
		Py_RETURN_FALSE;
	if (err)
		return raise_err(err, name);
	Py_RETURN_TRUE;
}

/* A call of the library on one name, GIL released: unregister, leave,
 * refresh. */
static PyObject *name_call(RegistryObject *self, PyObject *name,
			   int (*fn)(procreg_t *, const char *))
{
	PyObject *hold;
	const char *s;
	int err;

	if (check_open(self) || name_arg(name, &s, &hold))
		return NULL;
	UNLOCKED(self, err = fn(self->reg, s));
	Py_XDECREF(hold);
	if (err)
		return raise_err(err, name);
	Py_RETURN_NONE;
}

static PyObject *registry_unregister(RegistryObject *self, PyObject *name)
{
	return name_call(self, name, procreg_unregister);
}

static PyObject *registry_leave(RegistryObject *self, PyObject *group)
{
	return name_call(self, group, procreg_leave);
}

static PyObject *registry_refresh(RegistryObject *self, PyObject *name)
{
	return name_call(self, name, procreg_refresh);
}

/*
 * Replace the metadata of a name this process holds. The daemon has no
 * update request of its own: registering a name one holds replaces its
 * metadata (event EV_UPDATED). So the name is looked up first, and a name
 * that is not ours is refused here rather than registered or left to
 * fail with "taken". Between that check and the registration the name
 * may go (only by our own unregister or our death, or by another process
 * of our uid or root unregistering it): then this registers it afresh.
 */
static PyObject *registry_update(RegistryObject *self, PyObject *args)
{
	PyObject *name, *metadata, *hold;
	PROCREG_OPTS(procreg_entry, e);
	const char *s;
	Py_buffer b;
	int err;

	if (!PyArg_ParseTuple(args, "OO:update", &name, &metadata))
		return NULL;
	if (check_open(self) || name_arg(name, &s, &hold))
		return NULL;
	err = procreg_lookup(self->reg, s, &e);
	if (!err && (e.node != 0 || e.pid != getpid()))
		err = -EPERM;
	if (err) {
		Py_XDECREF(hold);
		return raise_err(err, name);
	}
	if (meta_arg(metadata, &b)) {
		Py_XDECREF(hold);
		return NULL;
	}
	UNLOCKED(self, err = procreg_register(self->reg, s, b.buf, b.len));
	PyBuffer_Release(&b);
	Py_XDECREF(hold);
	if (err)
		return raise_err(err, name);
	Py_RETURN_NONE;
}

static PyObject *registry_join(RegistryObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "group", "metadata", "lease_ms", NULL };
	PyObject *group, *metadata = NULL, *hold;
	PROCREG_OPTS(procreg_join_opts, o);
	unsigned int lease_ms = 0;
	const char *s;
	Py_buffer b;
	int err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$I:join", kwlist, &group, &metadata,
					 &lease_ms))
		return NULL;
	if (check_open(self) || name_arg(group, &s, &hold))
		return NULL;
	if (meta_arg(metadata, &b)) {
		Py_XDECREF(hold);
		return NULL;
	}
	o.lease_ms = lease_ms;
	UNLOCKED(self, err = procreg_join_opts(self->reg, s, b.buf, b.len, &o));
	PyBuffer_Release(&b);
	Py_XDECREF(hold);
	if (err)
		return raise_err(err, group);
	Py_RETURN_NONE;
}

/* Collects entries into a list; stops the walk (returns 1) on an error,
 * which is then set. */
struct collect {
	PyObject *list;
	PyObject *name; /* the name to give every entry; NULL: each its own */
};

static int collect_entry(const struct procreg_entry *e, void *arg)
{
	struct collect *c = arg;
	PyObject *name = c->name ? Py_NewRef(c->name) : decode(e->name), *o;
	int err;

	if (!name)
		return 1;
	o = entry_new(e, e->meta, name);
	Py_DECREF(name);
	if (!o)
		return 1;
	err = PyList_Append(c->list, o);
	Py_DECREF(o);
	return err ? 1 : 0;
}

static PyObject *registry_members(RegistryObject *self, PyObject *group)
{
	struct collect c = { NULL, group };
	PyObject *hold;
	const char *s;
	int err;

	if (check_open(self) || name_arg(group, &s, &hold))
		return NULL;
	c.list = PyList_New(0);
	if (!c.list) {
		Py_XDECREF(hold);
		return NULL;
	}
	err = procreg_members(self->reg, s, collect_entry, &c);
	Py_XDECREF(hold);
	if (err == 1 || err < 0) {
		Py_CLEAR(c.list);
		if (err < 0)
			raise_err(err, group);
	}
	return c.list;
}

static PyObject *registry_entries(RegistryObject *self, PyObject *unused)
{
	struct collect c = { NULL, NULL };
	int err;

	(void)unused;
	if (check_open(self) || !(c.list = PyList_New(0)))
		return NULL;
	err = procreg_foreach(self->reg, collect_entry, &c);
	if (err == 1 || err < 0) {
		Py_CLEAR(c.list);
		if (err < 0)
			raise_err(err, NULL);
	}
	return c.list;
}

static int collect_group(const struct procreg_group *g, void *arg)
{
	PyObject *list = arg, *o = PyStructSequence_New(&GroupType), *v[3];
	int err;

	if (!o)
		return 1;
	v[0] = decode(g->name);
	v[1] = PyLong_FromUnsignedLongLong(g->members);
	v[2] = PyLong_FromUnsignedLongLong(g->local_members);
	for (int i = 0; i < 3; i++) {
		if (!v[i]) {
			for (int j = i + 1; j < 3; j++)
				Py_XDECREF(v[j]);
			Py_DECREF(o);
			return 1;
		}
		PyStructSequence_SET_ITEM(o, i, v[i]);
	}
	err = PyList_Append(list, o);
	Py_DECREF(o);
	return err ? 1 : 0;
}

static PyObject *registry_groups(RegistryObject *self, PyObject *unused)
{
	PyObject *list;
	int err;

	(void)unused;
	if (check_open(self) || !(list = PyList_New(0)))
		return NULL;
	err = procreg_groups(self->reg, collect_group, list);
	if (err == 1 || err < 0) {
		Py_CLEAR(list);
		if (err < 0)
			raise_err(err, NULL);
	}
	return list;
}

/* Run a wait of the library with the GIL released: True when satisfied,
 * False on timeout. A signal interrupts it (-EINTR) so that its Python
 * handler runs (KeyboardInterrupt ends the wait); then it goes on for
 * what is left of the timeout. */
struct wait_args {
	const char *name;
	uint64_t count;
	int group;
};

static PyObject *run_wait(RegistryObject *self, const struct wait_args *w, PyObject *name,
			  int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	int err, left = timeout_ms;

	for (;;) {
		UNLOCKED(self, err = w->group ? procreg_wait_group(self->reg, w->name, w->count, left)
					      : procreg_wait(self->reg, w->name, left));
		if (err != -EINTR)
			break;
		if (PyErr_CheckSignals())
			return NULL;
		if (deadline >= 0) {
			int64_t rest = deadline - now_ms();

			left = rest > 0 ? (int)rest : 0;
		}
	}
	if (err == -ETIMEDOUT)
		Py_RETURN_FALSE;
	if (err)
		return raise_err(err, name);
	Py_RETURN_TRUE;
}

static PyObject *registry_wait(RegistryObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "timeout", NULL };
	PyObject *name, *timeout = NULL, *hold, *r;
	struct wait_args w = { 0 };
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:wait", kwlist, &name, &timeout))
		return NULL;
	if (timeout_arg(timeout, &ms) || check_open(self) || name_arg(name, &w.name, &hold))
		return NULL;
	r = run_wait(self, &w, name, ms);
	Py_XDECREF(hold);
	return r;
}

static PyObject *registry_wait_group(RegistryObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "group", "count", "timeout", NULL };
	PyObject *group, *timeout = NULL, *hold, *r;
	struct wait_args w = { .group = 1 };
	unsigned long long count;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OK|O:wait_group", kwlist, &group, &count,
					 &timeout))
		return NULL;
	if (timeout_arg(timeout, &ms) || check_open(self) || name_arg(group, &w.name, &hold))
		return NULL;
	w.count = count;
	r = run_wait(self, &w, group, ms);
	Py_XDECREF(hold);
	return r;
}

static PyObject *registry_sync(RegistryObject *self, PyObject *unused)
{
	int err;

	(void)unused;
	if (check_open(self))
		return NULL;
	UNLOCKED(self, err = procreg_sync(self->reg));
	if (err)
		return raise_err(err, NULL);
	Py_RETURN_NONE;
}

static PyObject *watch_new(RegistryObject *reg);

static PyObject *registry_watch(RegistryObject *self, PyObject *unused)
{
	(void)unused;
	if (check_open(self))
		return NULL;
	return watch_new(self);
}

static PyMethodDef registry_methods[] = {
	{ "lookup", (PyCFunction)registry_lookup, METH_O,
	  "lookup(name) -> Entry | None\n\nThe entry of NAME, or None if it is not registered. "
	  "Reads the shared table: no system call, no daemon." },
	{ "lookup_many", (PyCFunction)registry_lookup_many, METH_O,
	  "lookup_many(names) -> list[Entry | None]\n\nlookup() of every name of NAMES (an iterable), "
	  "in one call of the library (procreg_lookup_many), which overlaps their memory reads." },
	{ "register", (PyCFunction)(void (*)(void))registry_register, METH_VARARGS | METH_KEYWORDS,
	  "register(name, metadata=b'', *, queue=False, replaceable=False, replace=False, "
	  "lease_ms=0) -> bool\n\nRegister NAME for this process. True once it is ours; False "
	  "if queue=True put us in line behind its owner. NameTaken if another process holds "
	  "it." },
	{ "unregister", (PyCFunction)registry_unregister, METH_O,
	  "unregister(name)\n\nRemove NAME: NotFound if it is not registered." },
	{ "update", (PyCFunction)registry_update, METH_VARARGS,
	  "update(name, metadata)\n\nReplace the metadata of a name this process holds: "
	  "NotFound if it is not registered, PermissionDenied if another process holds it." },
	{ "refresh", (PyCFunction)registry_refresh, METH_O,
	  "refresh(name)\n\nRenew the lease of NAME (and of our leased membership of group "
	  "NAME)." },
	{ "join", (PyCFunction)(void (*)(void))registry_join, METH_VARARGS | METH_KEYWORDS,
	  "join(group, metadata=b'', *, lease_ms=0)\n\nJoin GROUP (again: replace the "
	  "membership's metadata)." },
	{ "leave", (PyCFunction)registry_leave, METH_O,
	  "leave(group)\n\nLeave GROUP: NotFound if not a member." },
	{ "members", (PyCFunction)registry_members, METH_O,
	  "members(group) -> list[Entry]\n\nThe members of GROUP (empty if it has none)." },
	{ "groups", (PyCFunction)registry_groups, METH_NOARGS,
	  "groups() -> list[Group]\n\nEvery group, with its member counts." },
	{ "entries", (PyCFunction)registry_entries, METH_NOARGS,
	  "entries() -> list[Entry]\n\nEvery registered name." },
	{ "wait", (PyCFunction)(void (*)(void))registry_wait, METH_VARARGS | METH_KEYWORDS,
	  "wait(name, timeout=None) -> bool\n\nBlock until NAME is registered: True, or False "
	  "after TIMEOUT seconds (None: no limit)." },
	{ "wait_group", (PyCFunction)(void (*)(void))registry_wait_group,
	  METH_VARARGS | METH_KEYWORDS,
	  "wait_group(group, count, timeout=None) -> bool\n\nBlock until GROUP has at least "
	  "COUNT members: True, or False after TIMEOUT seconds." },
	{ "sync", (PyCFunction)registry_sync, METH_NOARGS,
	  "sync()\n\nReturn once the daemon has processed every request and every process "
	  "death that happened before the call." },
	{ "watch", (PyCFunction)registry_watch, METH_NOARGS,
	  "watch() -> Watch\n\nFollow the change feed from now on." },
	{ "close", (PyCFunction)registry_close, METH_NOARGS,
	  "close()\n\nRelease the handle (names stay registered: they belong to the process)." },
	{ "__enter__", (PyCFunction)registry_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)registry_exit, METH_VARARGS, NULL },
	{ NULL },
};

static PyGetSetDef registry_getset[] = {
	{ "closed", (getter)registry_closed, NULL, "True once closed", NULL },
	{ NULL },
};

static PySequenceMethods registry_as_sequence = {
	.sq_contains = (objobjproc)registry_contains,
};

static PyTypeObject RegistryType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "procreg.Registry",
	.tp_doc = "Registry(scope=None, *, dir=None)\n\nA handle on the registry of SCOPE "
		  "($PROCREG_SCOPE, else 'default') in DIR ($PROCREG_DIR, else /dev/shm).",
	.tp_basicsize = sizeof(RegistryObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)registry_init,
	.tp_dealloc = (destructor)registry_dealloc,
	.tp_methods = registry_methods,
	.tp_getset = registry_getset,
	.tp_as_sequence = &registry_as_sequence,
};

/* ==== Watch ============================================================= */

typedef struct {
	PyObject_HEAD
	RegistryObject *reg;
	uint64_t cursor;
	int fd; /* procreg_feed_fd(), made by fileno(); -1: none */
} WatchObject;

static PyTypeObject WatchType;

static PyObject *watch_new(RegistryObject *reg)
{
	WatchObject *w = PyObject_New(WatchObject, &WatchType);

	if (!w)
		return NULL;
	w->reg = (RegistryObject *)Py_NewRef(reg);
	w->cursor = procreg_feed_head(reg->reg);
	w->fd = -1;
	return (PyObject *)w;
}

static void watch_dealloc(WatchObject *w)
{
	if (w->fd >= 0)
		close(w->fd);
	Py_XDECREF(w->reg);
	PyObject_Free(w);
}

/* The next event, waiting up to TIMEOUT_MS (-1: no limit): the Event, or
 * None on timeout, or NULL with an exception (Overflow when the ring
 * lapped us: the cursor has moved on, and the next call goes on from
 * the oldest event left). */
static PyObject *watch_next_ms(WatchObject *w, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	PROCREG_OPTS(procreg_event, ev);
	int err, left = timeout_ms;
	uint64_t cursor = w->cursor;

	if (check_open(w->reg))
		return NULL;
	for (;;) {
		if (left == 0) {
			err = procreg_next_event(w->reg->reg, &cursor, &ev, 0);
		} else {
			/* Another thread may use this Watch meanwhile: the
			 * cursor is ours until we are back. */
			UNLOCKED(w->reg, err = procreg_next_event(w->reg->reg, &cursor, &ev, left));
		}
		if (err != -EINTR)
			break;
		if (PyErr_CheckSignals())
			return NULL;
		if (deadline >= 0) {
			int64_t rest = deadline - now_ms();

			left = rest > 0 ? (int)rest : 0;
		}
	}
	w->cursor = cursor;
	if (err == -ETIMEDOUT)
		Py_RETURN_NONE;
	if (err)
		return raise_err(err, NULL);
	return event_new(&ev);
}

static PyObject *watch_iternext(WatchObject *w)
{
	return watch_next_ms(w, -1);
}

static PyObject *watch_next(WatchObject *w, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "timeout", NULL };
	PyObject *timeout = NULL;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:next", kwlist, &timeout) ||
	    timeout_arg(timeout, &ms))
		return NULL;
	return watch_next_ms(w, ms);
}

static PyObject *watch_fileno(WatchObject *w, PyObject *unused)
{
	(void)unused;
	if (check_open(w->reg))
		return NULL;
	if (w->fd < 0) {
		int fd;

		UNLOCKED(w->reg, fd = procreg_feed_fd(w->reg->reg));
		if (fd < 0)
			return raise_err(fd, NULL);
		w->fd = fd;
	}
	return PyLong_FromLong(w->fd);
}

/* For a selector or an event loop that found fileno() readable: clear the
 * notification first, then read what is there, so that an event published
 * meanwhile leaves the fd readable again. */
static PyObject *watch_drain(WatchObject *w, PyObject *unused)
{
	PyObject *list, *ev;
	int err;

	(void)unused;
	if (w->fd >= 0) {
		err = procreg_feed_fd_clear(w->fd);
		if (err == -ECONNRESET) {
			/* The daemon went away: the next fileno() makes a
			 * new connection once it is back. */
			close(w->fd);
			w->fd = -1;
		} else if (err) {
			return raise_err(err, NULL);
		}
	}
	if (!(list = PyList_New(0)))
		return NULL;
	while ((ev = watch_next_ms(w, 0)) != Py_None) {
		if (!ev || PyList_Append(list, ev)) {
			Py_XDECREF(ev);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(ev);
	}
	Py_DECREF(ev);
	return list;
}

static PyObject *watch_close(WatchObject *w, PyObject *unused)
{
	(void)unused;
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	Py_RETURN_NONE;
}

static PyObject *watch_enter(WatchObject *w, PyObject *unused)
{
	(void)unused;
	return Py_NewRef(w);
}

static PyObject *watch_exit(WatchObject *w, PyObject *args)
{
	(void)args;
	return watch_close(w, NULL);
}

static PyObject *watch_get_cursor(WatchObject *w, void *c)
{
	(void)c;
	return PyLong_FromUnsignedLongLong(w->cursor);
}

static PyMethodDef watch_methods[] = {
	{ "next", (PyCFunction)(void (*)(void))watch_next, METH_VARARGS | METH_KEYWORDS,
	  "next(timeout=None) -> Event | None\n\nThe next event, or None after TIMEOUT "
	  "seconds. Overflow if the feed lapped this watch (events were lost: read the table "
	  "again; the watch goes on from the oldest event left)." },
	{ "fileno", (PyCFunction)watch_fileno, METH_NOARGS,
	  "fileno() -> int\n\nA descriptor that turns readable when events come, for "
	  "selectors and asyncio (loop.add_reader); then call drain()." },
	{ "drain", (PyCFunction)watch_drain, METH_NOARGS,
	  "drain() -> list[Event]\n\nClear fileno()'s readiness and return the events there "
	  "are, without waiting." },
	{ "close", (PyCFunction)watch_close, METH_NOARGS, "close()\n\nClose fileno()." },
	{ "__enter__", (PyCFunction)watch_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)watch_exit, METH_VARARGS, NULL },
	{ NULL },
};

static PyGetSetDef watch_getset[] = {
	{ "cursor", (getter)watch_get_cursor, NULL, "the sequence number of the last event read",
	  NULL },
	{ NULL },
};

static PyTypeObject WatchType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "procreg.Watch",
	.tp_doc = "The change feed, from Registry.watch(): an iterator of Events (blocking), "
		  "or fileno() and drain() for an event loop.",
	.tp_basicsize = sizeof(WatchObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)watch_dealloc,
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = (iternextfunc)watch_iternext,
	.tp_methods = watch_methods,
	.tp_getset = watch_getset,
};

/* ==== the module ======================================================== */

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(procreg_version());
}

static PyMethodDef module_methods[] = {
	{ "version", mod_version, METH_NOARGS, "The version of the libprocreg loaded." },
	{ NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "procreg",
	.m_doc = "procreg, the process registry: look services up by name, lock-free, through "
		 "libprocreg.",
	.m_size = -1,
	.m_methods = module_methods,
};

/* Add exception NAME, subclass of BASES (a class or a tuple), to M. */
static PyObject *add_exception(PyObject *m, const char *name, PyObject *bases, const char *doc)
{
	char full[64];
	PyObject *e;

	snprintf(full, sizeof(full), "procreg.%s", name);
	e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	if (e && PyModule_AddObjectRef(m, name, e)) {
		Py_DECREF(e);
		return NULL;
	}
	return e;
}

static PyObject *add_error(PyObject *m, const char *name, PyObject *also, const char *doc)
{
	PyObject *bases = also ? PyTuple_Pack(2, Error, also) : Py_NewRef(Error), *e;

	if (!bases)
		return NULL;
	e = add_exception(m, name, bases, doc);
	Py_DECREF(bases);
	return e;
}

PyMODINIT_FUNC PyInit_procreg(void)
{
	static const struct {
		const char *name;
		long value;
	} ints[] = {
		{ "NAME_MAX", PROCREG_NAME_MAX },
		{ "META_MAX", PROCREG_META_MAX },
		{ "ENTRY_REPLACEABLE", PROCREG_ENTRY_REPLACEABLE },
		{ "ENTRY_LEASED", PROCREG_ENTRY_LEASED },
		{ "ENTRY_UNHEALTHY", PROCREG_ENTRY_UNHEALTHY },
		{ "EV_REGISTERED", PROCREG_EV_REGISTERED },
		{ "EV_UNREGISTERED", PROCREG_EV_UNREGISTERED },
		{ "EV_UPDATED", PROCREG_EV_UPDATED },
		{ "EV_JOINED", PROCREG_EV_JOINED },
		{ "EV_LEFT", PROCREG_EV_LEFT },
		{ "EV_DIED", PROCREG_EV_DIED },
		{ "EV_TRANSFERRED", PROCREG_EV_TRANSFERRED },
		{ "EV_REPLACED", PROCREG_EV_REPLACED },
		{ "EV_EXPIRED", PROCREG_EV_EXPIRED },
		{ "EV_REFRESHED", PROCREG_EV_REFRESHED },
		{ "EV_NODE_DOWN", PROCREG_EV_NODE_DOWN },
		{ "EV_CONFLICT", PROCREG_EV_CONFLICT },
	};
	PyObject *m;

	if (PyType_Ready(&EntryType) || PyType_Ready(&RegistryType) || PyType_Ready(&WatchType))
		return NULL;
	if (!EventType.tp_name && PyStructSequence_InitType2(&EventType, &event_desc))
		return NULL;
	if (!GroupType.tp_name && PyStructSequence_InitType2(&GroupType, &group_desc))
		return NULL;
	m = PyModule_Create(&module);
	if (!m)
		return NULL;
	if (PyModule_AddType(m, &EntryType) || PyModule_AddType(m, &RegistryType) ||
	    PyModule_AddType(m, &WatchType) || PyModule_AddType(m, &EventType) ||
	    PyModule_AddType(m, &GroupType))
		goto fail;
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (PyModule_AddIntConstant(m, ints[i].name, ints[i].value))
			goto fail;
	Error = add_exception(m, "Error", PyExc_OSError,
			      "A libprocreg error: .errno is the errno, .strerror its message, "
			      ".filename the name it was about.");
	if (!Error ||
	    !(NameTaken = add_error(m, "NameTaken", PyExc_FileExistsError,
				    "Another process holds the name (EEXIST).")) ||
	    !(NotFound = add_error(m, "NotFound", PyExc_FileNotFoundError,
				   "No such name, membership or table (ENOENT).")) ||
	    !(PermissionDenied = add_error(m, "PermissionDenied", PyExc_PermissionError,
					   "Not the owner's, or not a trusted table (EPERM, "
					   "EACCES).")) ||
	    !(InvalidArgument = add_error(m, "InvalidArgument", PyExc_ValueError,
					  "A name or metadata that could never be registered "
					  "(EINVAL, ENAMETOOLONG, EMSGSIZE).")) ||
	    !(Timeout = add_error(m, "Timeout", PyExc_TimeoutError, "Timed out (ETIMEDOUT).")) ||
	    !(Overflow = add_error(m, "Overflow", NULL,
				   "The change feed lapped this watch: events were lost "
				   "(EOVERFLOW).")) ||
	    !(QuotaExceeded = add_error(m, "QuotaExceeded", NULL,
					"Too many names for this process or uid (EDQUOT).")))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
