/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * env.c - the bench's private world: a temporary directory, the procregd
 * processes it starts there, the children it forks, CPU pinning, and the
 * clean-up that removes all of it.
 *
 * The directory is <base>/procreg-bench.XXXXXX, where base is --tmpdir, or
 * /dev/shm (where tables live in production: tmpfs), or $TMPDIR, or /tmp.
 * Each procregd gets --dir DIR, which holds its table, reader file, socket
 * and our log of its stderr. The default scope and /dev/shm/procreg.* are
 * never touched.
 *
 * CLEAN-UP. Every child we fork, procregd included, is recorded in a fixed
 * array, and carries PR_SET_PDEATHSIG so that it dies with us even if we
 * are SIGKILLed. env_cleanup() kills the children, stops the daemons and
 * empties and removes the directory. It runs at exit and from the handler
 * of SIGINT, SIGTERM and SIGHUP, so it uses only async-signal-safe calls:
 * kill, waitpid, nanosleep, and getdents64 + unlinkat for the directory
 * (its paths are built before any signal can arrive).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ---- time, CPUs, shared memory ---------------------------------------- */

void sleep_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int ncpus;
int cpus[BENCH_MAX_CPUS];

static void cpus_init(void)
{
	cpu_set_t set;

	ncpus = 0;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		for (int c = 0; c < CPU_SETSIZE && ncpus < BENCH_MAX_CPUS; c++)
			if (CPU_ISSET(c, &set))
				cpus[ncpus++] = c;
	}
	if (ncpus == 0)
		cpus[ncpus++] = 0;
}

int pin(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	if (cpu >= 0) {
		CPU_SET(cpu, &set);
	} else {
		for (int i = 0; i < ncpus; i++)
			CPU_SET(cpus[i], &set);
	}
	return sched_setaffinity(pid, sizeof(set), &set) < 0 ? -errno : 0;
}

const char *cpu_label(int cpu)
{
	static char buf[8][16];
	static int k;
	char *b = buf[k++ % 8];

	if (cpu < 0)
		return "any";
	snprintf(b, 16, "%d", cpu);
	return b;
}

void *shared_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("procreg-bench: mmap");
		exit(2);
	}
	return p;
}

void shared_free(void *p, size_t size)
{
	munmap(p, size);
}

void futex_wait(int *addr, int val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT, val, NULL, NULL, 0);
}

void futex_wait_ms(int *addr, int val, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void futex_wake_all(int *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- tracked children -------------------------------------------------- */

#define MAX_CHILDREN 65536

static pid_t parent_pid;
/* Written by the main flow, read by the signal handler: entries are set
 * before a child can matter and cleared only after it is reaped. */
static volatile pid_t children[MAX_CHILDREN];
static volatile sig_atomic_t nchildren_hw;       /* high-water mark of used entries */
static volatile pid_t daemons[16];
static char dir[256];             /* short: it holds the daemon's socket */
static volatile sig_atomic_t cleaning;

static void track(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++) {
		if (children[i] == 0) {
			children[i] = pid;
			if (i >= nchildren_hw)
				nchildren_hw = i + 1;
			return;
		}
	}
}

static void untrack(pid_t pid)
{
	for (int i = 0; i < nchildren_hw; i++)
		if (children[i] == pid)
			children[i] = 0;
}

/* In a new child: die with the parent, default signal handling. */
static void child_setup(int deathsig)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, deathsig);
	/* The parent may have died between fork and prctl. */
	if (getppid() != parent_pid)
		_exit(1);
}

pid_t spawn(int (*fn)(void *), void *arg, int cpu)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		child_setup(SIGKILL);
		if (cpu >= 0)
			pin(0, cpu);
		_exit(fn(arg));
	}
	track(pid);
	return pid;
}

static int wait_status(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

int reap(pid_t pid)
{
	int st = wait_status(pid);

	untrack(pid);
	return st;
}

void kill_child(pid_t pid)
{
	kill(pid, SIGKILL);
}

/* ---- the directory ----------------------------------------------------- */

const char *env_dir(void)
{
	return dir;
}

/* Remove every entry of DIR (flat: we create no subdirectories), then DIR.
 * getdents64 and unlinkat only: this runs in a signal handler. */
static void rm_dir(void)
{
	char buf[4096];
	int fd, removed;
	long n;

	if (!dir[0])
		return;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		/* Passes until one removes nothing: unlinking while reading a
		 * directory may make getdents skip entries. */
		do {
			removed = 0;
			lseek(fd, 0, SEEK_SET);
			while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
				for (long off = 0; off < n;) {
					struct dirent64 *d = (struct dirent64 *)(buf + off);

					if (strcmp(d->d_name, ".") && strcmp(d->d_name, "..") &&
					    unlinkat(fd, d->d_name, 0) == 0)
						removed++;
					off += d->d_reclen;
				}
			}
		} while (removed);
		close(fd);
	}
	rmdir(dir);
}

/* Async-signal-safe: see the file comment. */
static void stop_daemon_pid(pid_t pid)
{
	struct timespec ts = { 0, 1000000 };
	int st;

	kill(pid, SIGTERM);
	for (int i = 0; i < 3000; i++) {
		if (waitpid(pid, &st, WNOHANG) != 0)
			return;
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

void env_cleanup(void)
{
	int st;

	if (getpid() != parent_pid || cleaning)
		return;
	cleaning = 1;
	for (int i = 0; i < nchildren_hw; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	for (int i = 0; i < nchildren_hw; i++) {
		if (children[i] > 0) {
			while (waitpid(children[i], &st, 0) < 0 && errno == EINTR)
				;
			children[i] = 0;
		}
	}
	for (int i = 0; i < 16; i++) {
		if (daemons[i] > 0) {
			stop_daemon_pid(daemons[i]);
			daemons[i] = 0;
		}
	}
	rm_dir();
	dir[0] = 0;
}

static void on_signal(int sig)
{
	env_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
	_exit(128 + sig);
}

static void at_exit(void)
{
	env_cleanup();
}

int env_init(void)
{
	const char *base = bo.tmpdir;
	struct sigaction sa = { .sa_handler = on_signal };
	char path[sizeof(dir)];

	parent_pid = getpid();
	cpus_init();
	if (!base) {
		if (access("/dev/shm", W_OK) == 0)
			base = "/dev/shm";
		else if (!(base = getenv("TMPDIR")) || !*base)
			base = "/tmp";
	}
	snprintf(path, sizeof(path), "%s/procreg-bench.XXXXXX", base);
	/* The daemon's socket lives in the directory too: sun_path is short. */
	if (strlen(path) + 24 > 107) {
		fprintf(stderr, "procreg-bench: %s: path too long for a unix socket\n", base);
		return -ENAMETOOLONG;
	}
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaddset(&sa.sa_mask, SIGHUP);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	atexit(at_exit);
	if (!mkdtemp(path)) {
		fprintf(stderr, "procreg-bench: mkdtemp %s: %s\n", path, strerror(errno));
		return -errno;
	}
	/* Published to the handler only once it names our directory. */
	snprintf(dir, sizeof(dir), "%s", path);
	return 0;
}

/* ---- procregd ---------------------------------------------------------- */

/* The directory procreg-bench runs from ("" if it cannot be read). */
const char *bench_self_dir(void)
{
	static char self[PATH_MAX - 64];
	ssize_t n;
	char *slash;

	if (self[0])
		return self;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return "";
	self[n] = 0;
	slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	return self;
}

static const char *find_procregd(void)
{
	static char path[PATH_MAX];

	if (bo.procregd)
		return bo.procregd;
	/* In the build tree both sit in one directory; installed, the bench
	 * is in LIBEXECDIR/procreg and the daemon where this relative path
	 * from there says (SBINDIR). */
	snprintf(path, sizeof(path), "%s/procregd", bench_self_dir());
	if (access(path, X_OK) == 0)
		return path;
	snprintf(path, sizeof(path), "%s/%s/procregd", bench_self_dir(), PROCREG_BENCH_SBIN_RELDIR);
	if (access(path, X_OK) == 0)
		return path;
	return NULL;
}

procreg_t *bench_open(const char *scope)
{
	PROCREG_OPTS(procreg_opts, o, .dir = dir, .scope = scope);

	return procreg_open(&o);
}

int daemon_start(struct daemon_proc *d, const char *scope, const char *const *args)
{
	const char *exe = find_procregd(), *argv[64];
	char log[PATH_MAX];
	int n = 0, slot = -1;

	memset(d, 0, sizeof(*d));
	snprintf(d->scope, sizeof(d->scope), "%s", scope);
	if (!exe) {
		fprintf(stderr, "procreg-bench: procregd not found next to procreg-bench, nor in %s/%s: use --procregd PATH\n",
			bench_self_dir(), PROCREG_BENCH_SBIN_RELDIR);
		return -ENOENT;
	}
	for (int i = 0; i < 16; i++)
		if (daemons[i] == 0) {
			slot = i;
			break;
		}
	if (slot < 0)
		return -EMFILE;
	snprintf(log, sizeof(log), "%s/procregd.%s.log", dir, scope);
	argv[n++] = exe;
	argv[n++] = "--foreground";
	argv[n++] = "--dir";
	argv[n++] = dir;
	argv[n++] = "--scope";
	argv[n++] = scope;
	for (int i = 0; args && args[i] && n < 62; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		struct rlimit rl;
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		/* SIGTERM: a daemon left behind by our death stops cleanly. */
		child_setup(SIGTERM);
		if (fd >= 0)
			dup2(fd, 2);
		/* About three descriptors per client process (socket, its
		 * pidfd, the owner's pidfd): give it what the system allows. */
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		execv(exe, (char **)argv);
		_exit(127);
	}
	daemons[slot] = d->pid;
	for (uint64_t end = pr_mono_ns() + 20000000000ull; pr_mono_ns() < end;) {
		procreg_t *r = bench_open(scope);
		int st;

		if (r) {
			PROCREG_OPTS(procreg_stats, s);

			procreg_stats(r, &s);
			procreg_close(r);
			if (s.daemon_pid == d->pid)
				return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			daemons[slot] = 0;
			d->pid = 0;
			fprintf(stderr, "procreg-bench: procregd exited at start-up\n");
			daemon_dump_log(d);
			return -ECHILD;
		}
		sleep_ms(1);
	}
	/* A --procregd wrapper that forks the daemon (perf record does)
	 * rather than exec'ing it in place (valgrind, exec) serves a daemon
	 * whose pid is not the one we started: this is where it ends. */
	fprintf(stderr, "procreg-bench: no procregd of pid %d answered on scope %s within 20 s "
		"(a --procregd program must exec the daemon in place)\n", (int)d->pid, scope);
	daemon_dump_log(d);
	return -ETIMEDOUT;
}

void daemon_dump_log(const struct daemon_proc *d)
{
	char path[PATH_MAX], buf[4096];
	FILE *f;
	size_t k;

	snprintf(path, sizeof(path), "%s/procregd.%s.log", dir, d->scope);
	f = fopen(path, "r");
	if (!f)
		return;
	fprintf(stderr, "procreg-bench: procregd's log:\n");
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, k, stderr);
	fclose(f);
}

void daemon_stop(struct daemon_proc *d)
{
	char path[PATH_MAX];

	if (!d->pid)
		return;
	stop_daemon_pid(d->pid);
	for (int i = 0; i < 16; i++)
		if (daemons[i] == d->pid)
			daemons[i] = 0;
	d->pid = 0;
	/* The daemon leaves its table in place (names belong to processes):
	 * ours are done with it. */
	snprintf(path, sizeof(path), "%s/procreg.%s", dir, d->scope);
	unlink(path);
	snprintf(path, sizeof(path), "%s/procreg.%s.owners", dir, d->scope);
	unlink(path);
	snprintf(path, sizeof(path), "%s/procreg.%s.sock", dir, d->scope);
	unlink(path);
}

/* ---- names ------------------------------------------------------------- */

void name_of(struct qname *q, const char *prefix, uint64_t i)
{
	snprintf(q->s, sizeof(q->s), "%s.%08llu", prefix, (unsigned long long)i);
}

size_t meta_of(char *buf, size_t len, uint64_t i)
{
	return (size_t)snprintf(buf, len, "unix:/run/svc.%08llu.sock", (unsigned long long)i);
}

int prepare(struct prepared *p, const char *prefix, uint64_t first, size_t n)
{
	size_t room = n ? n : 1;

	p->n = n;
	p->ops = calloc(room, sizeof(*p->ops));
	p->names = calloc(room, sizeof(*p->names));
	p->metas = calloc(room, 40);
	p->meta_lens = calloc(room, sizeof(*p->meta_lens));
	if (!p->ops || !p->names || !p->metas || !p->meta_lens) {
		prepared_free(p);
		return -ENOMEM;
	}
	for (size_t j = 0; j < n; j++) {
		name_of(&p->names[j], prefix, first + j);
		p->meta_lens[j] = meta_of(p->metas[j], 40, first + j);
		p->ops[j].sz = sizeof(p->ops[j]);
		p->ops[j].name = p->names[j].s;
		p->ops[j].meta = p->metas[j];
	}
	return 0;
}

int64_t prepared_batch(procreg_t *reg, struct prepared *p, bool unregister)
{
	int64_t done = 0;
	int err;

	for (size_t j = 0; j < p->n; j++) {
		p->ops[j].kind = unregister ? PROCREG_OP_UNREGISTER : PROCREG_OP_REGISTER;
		p->ops[j].meta_len = unregister ? 0 : p->meta_lens[j];
	}
	err = procreg_batch(reg, p->ops, p->n);
	if (err)
		return err;
	for (size_t j = 0; j < p->n; j++)
		done += p->ops[j].result == 0;
	return done;
}

void prepared_free(struct prepared *p)
{
	free(p->ops);
	free(p->names);
	free(p->metas);
	free(p->meta_lens);
	memset(p, 0, sizeof(*p));
}

int64_t register_range(procreg_t *reg, const char *prefix, uint64_t first, uint64_t n,
		       bool unregister)
{
	enum { CHUNK = 65536 };
	int64_t done = 0;

	/* A chunk at a time, each as much room as it takes: a process
	 * registering a hundred names would otherwise have calloc clear
	 * megabytes on every call once glibc serves them from its heap
	 * (after the first free it raises its mmap threshold), and the bench
	 * would measure its own memset (it did: re-registering 100k names
	 * over 1,000 processes took 30 s instead of 1). */
	for (uint64_t base = 0; base < n; base += CHUNK) {
		size_t k = n - base < CHUNK ? (size_t)(n - base) : CHUNK;
		struct prepared p;
		int64_t got;

		if (prepare(&p, prefix, first + base, k) < 0)
			return -ENOMEM;
		got = prepared_batch(reg, &p, unregister);
		prepared_free(&p);
		if (got < 0)
			return got;
		done += got;
	}
	return done;
}

uint64_t rng_next(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The fields of /proc/PID/stat after the command name (which may hold
 * spaces), into BUF: a pointer to the state field, or NULL. */
static const char *stat_fields(pid_t pid, char *buf, size_t size)
{
	char path[64], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return NULL;
	n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p + 2 : NULL;
}

/* PID's CPU time so far, in clock ticks (utime + stime); 0 if unknown. */
static uint64_t cpu_ticks(pid_t pid)
{
	char buf[1024];
	const char *p = stat_fields(pid, buf, sizeof(buf));
	unsigned long long ut = 0, st = 0;

	/* Fields 14 and 15. */
	if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

uint64_t proc_cpu_ns(pid_t pid)
{
	clockid_t c;
	struct timespec ts;
	char buf[1024];
	const char *st;

	/* The process's CPU clock: every thread's, to the nanosecond (the
	 * ticks of /proc/PID/stat are 10 ms, as long as a step). The kernel
	 * brings another process's clock up to date only when that process
	 * is switched out, or at a tick: read while it runs on another CPU,
	 * the clock still says what it said at its last switch (a short
	 * burst of work could read as none at all). So it is read once the
	 * process sleeps, waiting 20 ms at most. */
	for (int i = 0; i < 400 && (st = stat_fields(pid, buf, sizeof(buf))) && *st == 'R'; i++)
		usleep(50);
	if (clock_getcpuclockid(pid, &c) || clock_gettime(c, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double wait_idle(pid_t pid, int max_ms)
{
	uint64_t t0 = pr_mono_ns(), last = cpu_ticks(pid);
	int quiet = 0;

	/* Quiet: no tick for three 20 ms looks in a row. */
	while (quiet < 3) {
		uint64_t now;

		sleep_ms(20);
		now = cpu_ticks(pid);
		quiet = now == last ? quiet + 1 : 0;
		last = now;
		if (pr_mono_ns() - t0 > (uint64_t)max_ms * 1000000)
			return -1;
	}
	return (double)(pr_mono_ns() - t0) / 1e6;
}
