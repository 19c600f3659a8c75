/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_package.c - procreg as an installed package: cmake --install into a
 * temporary prefix, a small program built against it with pkg-config and
 * with find_package(procreg) (cc, pkg-config and cmake from PATH) and run
 * against a daemon; the man pages against --help; socket activation the
 * way systemd does it (LISTEN_FDS, LISTEN_PID, fd 3).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define A(...) ((const char *const[]){ __VA_ARGS__, NULL })

struct fx {
	char *dir;
	struct th_daemon d;
	pid_t activated;        /* a socket-activated procregd */
	struct th_out *o;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->o = calloc(1, sizeof(*f->o));
	assert_non_null(f->o);
	f->dir = th_mkdtemp();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st = 0;

	if (f->d.pid)
		st = th_daemon_stop(&f->d);
	if (f->activated) {
		kill(f->activated, SIGTERM);
		st = st ?: th_wait(f->activated);
	}
	th_rmrf(f->dir);
	free(f->dir);
	free(f->o);
	free(f);
	assert_int_equal(st, 0);
	return 0;
}

/* sh -c CMD with extra environment ENV; fails the test unless it exits 0. */
static void sh(struct fx *f, const char *const *env, const char *cmd)
{
	int st = th_run(f->o, env, A("/bin/sh", "-c", cmd));

	if (st != 0)
		fail_msg("'%s' exited %d\nstdout:\n%s\nstderr:\n%s", cmd, st, f->o->out, f->o->err);
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

/* ---- the installed package -------------------------------------------- */

static const char prog_c[] =
	"#include <stdio.h>\n"
	"#include <string.h>\n"
	"#include <unistd.h>\n"
	"#include <procreg.h>\n"
	"#if !PROCREG_VERSION_CHECK(0, 1, 0) || PROCREG_VERSION_CHECK(255, 0, 0)\n"
	"#error PROCREG_VERSION_CHECK\n"
	"#endif\n"
	"int main(int argc, char **argv)\n"
	"{\n"
	"	char meta[PROCREG_META_MAX];\n"
	"	PROCREG_OPTS(procreg_entry, e, .meta = meta, .meta_size = sizeof(meta));\n"
	"	procreg_t *reg = procreg_open(NULL);\n"
	"	int err;\n"
	"	if (!reg || argc != 2)\n"
	"		return 2;\n"
	"	err = procreg_register(reg, argv[1], \"pkg\", 3);\n"
	"	if (!err)\n"
	"		err = procreg_lookup(reg, argv[1], &e);\n"
	"	if (!err && strcmp(PROCREG_VERSION_STRING, procreg_version()))\n"
	"		err = 3;\n"
	"	if (!err)\n"
	"		printf(\"%s %d %d %.*s %s\\n\", e.name, (int)e.pid, e.pid == getpid(),\n"
	"		       (int)e.meta_len, meta, procreg_version());\n"
	"	procreg_close(reg);\n"
	"	return err ? 1 : 0;\n"
	"}\n";

static const char cmakelists[] =
	"cmake_minimum_required(VERSION 3.18)\n"
	"project(procreg_user C)\n"
	"find_package(procreg REQUIRED)\n"
	"add_executable(prog prog.c)\n"
	"target_link_libraries(prog PRIVATE procreg::procreg)\n";

static void expect_file(const char *prefix, const char *rel)
{
	char path[1024];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", prefix, rel);
	if (stat(path, &st) < 0)
		fail_msg("not installed: %s", rel);
}

static void run_prog(struct fx *f, const char *prog, const char *name)
{
	char env_dir[600], want[512];

	snprintf(env_dir, sizeof(env_dir), "PROCREG_DIR=%s/run", f->dir);
	/* A sanitizer build installs an instrumented library: let a program
	 * built without the sanitizer load it. */
	if (th_run(f->o, A(env_dir, "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"),
		   A(prog, name)) != 0)
		fail_msg("%s exited non-zero:\n%s%s", prog, f->o->out, f->o->err);
	snprintf(want, sizeof(want), "%s ", name);
	assert_memory_equal(f->o->out, want, strlen(want));
	snprintf(want, sizeof(want), " 1 pkg %s\n", procreg_version());
	th_expect_in(f->o->out, want);
}

/* The installed tree as a distribution's package would have it. */
static void installed_layout(struct fx *f, const char *prefix)
{
	char cmd[4096], path[700], *text;
	struct stat st;

	/* The benchmark is no command for the PATH. */
	snprintf(path, sizeof(path), "%s/bin/procreg-bench", prefix);
	assert_int_equal(stat(path, &st), -1);

	/* The SONAME is the ABI number, not the version (README, "ABI"). */
	snprintf(cmd, sizeof(cmd), "objdump -p '%s/lib/libprocreg.so' | grep -w SONAME", prefix);
	sh(f, NULL, cmd);
	th_expect_in(f->o->out, " libprocreg.so." PROCREG_ABI "\n");

	/* Nothing of the build tree in the installed bench's constants, and
	 * it finds the installed procregd and library from its own place. */
	snprintf(cmd, sizeof(cmd),
		 "objcopy -O binary -j .rodata '%s/libexec/procreg/procreg-bench' '%s/bench.rodata' && "
		 "! grep -a -F -q '%s' '%s/bench.rodata' && test -s '%s/bench.rodata'",
		 prefix, f->dir, PROCREG_BUILD_DIR, f->dir, f->dir);
	sh(f, NULL, cmd);
	snprintf(cmd, sizeof(cmd), "'%s/libexec/procreg/procreg-bench' memory --quick --tmpdir '%s'",
		 prefix, f->dir);
	sh(f, A("ASAN_OPTIONS=detect_leaks=0"), cmd);
	th_expect_in(f->o->out, "names like");

	/* A system prefix (a package built with DESTDIR): absolute paths in
	 * procreg.pc, which pkg-config then knows for the system's own. */
	snprintf(cmd, sizeof(cmd), "DESTDIR='%s/destdir' cmake --install '%s' --prefix /usr",
		 f->dir, PROCREG_BUILD_DIR);
	sh(f, NULL, cmd);
	snprintf(path, sizeof(path), "%s/destdir/usr/lib/pkgconfig/procreg.pc", f->dir);
	text = th_read_file(path, true);
	th_expect_in(text, "\nprefix=/usr\n");
	assert_null(strstr(text, "pcfiledir"));
	free(text);
	snprintf(cmd, sizeof(cmd), "PKG_CONFIG_PATH='%s/destdir/usr/lib/pkgconfig' "
		 "pkg-config --cflags --libs procreg", f->dir);
	sh(f, NULL, cmd);
	assert_string_equal(f->o->out, "-lprocreg \n");

	/* Any other prefix: relative to the file's own place. */
	snprintf(path, sizeof(path), "%s/lib/pkgconfig/procreg.pc", prefix);
	text = th_read_file(path, true);
	th_expect_in(text, "\nprefix=${pcfiledir}/../..\n");
	free(text);
}

static void test_installed_package(void **state)
{
	struct fx *f = *state;
	static const char *const files[] = {
		"bin/procreg", "sbin/procregd", "include/procreg.h", "include/procreg/version.h",
		"include/procreg/backend.h", "include/procreg/resolver.h", "lib/libprocreg.so",
		"lib/libprocreg.a", "lib/pkgconfig/procreg.pc", "lib/cmake/procreg/procregConfig.cmake",
		"lib/cmake/procreg/procregConfigVersion.cmake", "share/man/man1/procreg.1",
		"share/man/man3/procreg.3", "share/man/man8/procregd.8",
		"share/bash-completion/completions/procreg", "share/bash-completion/completions/procregd",
		"lib/systemd/system/procregd@.service", "lib/systemd/system/procregd@.socket",
		"libexec/procreg/procreg-bench", "libexec/procreg/libprocreg_noprobes.so",
		"share/doc/procreg/LICENSE",
	};
	char cmd[4096], prefix[512], src[512], path[700], env_pc[700], *text;

	snprintf(prefix, sizeof(prefix), "%s/prefix", f->dir);
	snprintf(cmd, sizeof(cmd), "cmake --install '%s' --prefix '%s'", PROCREG_BUILD_DIR, prefix);
	sh(f, NULL, cmd);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		expect_file(prefix, files[i]);
	installed_layout(f, prefix);

	/* The service runs the installed daemon, one per scope. */
	snprintf(path, sizeof(path), "%s/lib/systemd/system/procregd@.service", prefix);
	text = th_read_file(path, true);
	snprintf(cmd, sizeof(cmd),
		 "\nExecStart=%s/sbin/procregd --foreground --scope %%i $PROCREGD_OPTS\n", prefix);
	th_expect_in(text, cmd);
	th_expect_in(text, "\nType=notify\n");
	/* As the system user the sysusers file makes, not root, with
	 * CAP_KILL alone. */
	th_expect_in(text, "\nUser=" PROCREG_DAEMON_USER_DEFAULT "\n");
	th_expect_in(text, "\nAmbientCapabilities=CAP_KILL\n");
	th_expect_in(text, "\nCapabilityBoundingSet=CAP_KILL\n");
	free(text);
	snprintf(path, sizeof(path), "%s/lib/sysusers.d/procreg.conf", prefix);
	text = th_read_file(path, true);
	th_expect_in(text, "\nu " PROCREG_DAEMON_USER_DEFAULT " - ");
	free(text);
	snprintf(path, sizeof(path), "%s/lib/systemd/system/procregd@.socket", prefix);
	text = th_read_file(path, true);
	th_expect_in(text, "\nListenSequentialPacket=/run/procreg/procreg.%i.sock\n");
	th_expect_in(text, "\nService=procregd@%i.service\n");
	free(text);

	/* A daemon, from the installed package, for the programs to use. */
	snprintf(path, sizeof(path), "%s/run", f->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	if (th_daemon_start(&f->d, path, NULL, NULL) != 0) {
		th_daemon_dump_log(&f->d);
		fail_msg("procregd did not start");
	}

	snprintf(src, sizeof(src), "%s/src", f->dir);
	assert_int_equal(mkdir(src, 0700), 0);
	snprintf(path, sizeof(path), "%s/prog.c", src);
	write_file(path, prog_c);
	snprintf(path, sizeof(path), "%s/CMakeLists.txt", src);
	write_file(path, cmakelists);

	/* pkg-config: a Makefile's way. */
	snprintf(env_pc, sizeof(env_pc), "PKG_CONFIG_PATH=%s/lib/pkgconfig", prefix);
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && cc -o prog-pc prog.c $(pkg-config --cflags --libs procreg) "
		 "-Wl,-rpath,$(pkg-config --variable=libdir procreg)",
		 src);
	sh(f, A(env_pc), cmd);
	snprintf(path, sizeof(path), "%s/prog-pc", src);
	run_prog(f, path, "pkg.pkgconfig");

	/* find_package(procreg). */
	snprintf(cmd, sizeof(cmd),
		 "cmake -S '%s' -B '%s/build' -DCMAKE_PREFIX_PATH='%s' && cmake --build '%s/build'",
		 src, src, prefix, src);
	sh(f, NULL, cmd);
	snprintf(path, sizeof(path), "%s/build/prog", src);
	run_prog(f, path, "pkg.cmake");

	/* procregd's plug-ins, built out of the tree from the installed
	 * headers alone (the sources copied away from the tree's, no -I but
	 * the prefix's) and needing no library of procreg's: a bridge
	 * backend that carries frames as bytes (the test switch's), one
	 * that carries nothing, a conflict resolver. procregd then runs with
	 * that resolver and the backend that carries nothing. */
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && cp '%s/tests/bridge_backend_null.c' '%s/tests/bridge_backend_testnet.c' "
		 "'%s/tests/testnet_wire.h' '%s/tests/resolver_primary.c' . && "
		 "for p in bridge_backend_null bridge_backend_testnet resolver_primary; do "
		 "cc -std=gnu11 -Wall -Wextra -Werror -fPIC -shared -Wl,--no-undefined "
		 "-I'%s/include' -o $p.so $p.c || exit 1; done",
		 src, PROCREG_SOURCE_DIR, PROCREG_SOURCE_DIR, PROCREG_SOURCE_DIR, PROCREG_SOURCE_DIR,
		 prefix);
	sh(f, NULL, cmd);
	snprintf(cmd, sizeof(cmd), "cd '%s' && cc -fsyntax-only -x c++ -I'%s/include' - <<'EOF'\n"
		 "#include <procreg.h>\n#include <procreg/backend.h>\n#include <procreg/resolver.h>\n"
		 "EOF", src, prefix);
	sh(f, NULL, cmd);
	snprintf(path, sizeof(path), "%s/cookie", f->dir);
	write_file(path, "a-test-cookie-0123456789\n");
	assert_int_equal(chmod(path, 0600), 0);
	{
		char be[700], rs[700];
		struct th_daemon bd = { 0 };

		snprintf(be, sizeof(be), "%s/bridge_backend_null.so", src);
		snprintf(rs, sizeof(rs), "%s/resolver_primary.so", src);
		if (th_daemon_start(&bd, src,
				    A("--node", "x", "--cookie-file", path, "--bridge-backend", be,
				      "--resolver", rs),
				    NULL) != 0) {
			th_daemon_dump_log(&bd);
			fail_msg("procregd with the backend and resolver built here did not start");
		}
		assert_int_equal(th_daemon_stop(&bd), 0);
	}

#ifdef PROCREG_NATS_BUILT
	/* The NATS backend, installed in LIBDIR/procreg, is what the
	 * installed procregd's --bridge nats loads: it answers for an option
	 * it does not know. */
	expect_file(prefix, "lib/procreg/procreg-bridge-nats.so");
	snprintf(cmd, sizeof(cmd), "%s/sbin/procregd", prefix);
	assert_int_not_equal(th_run(f->o, NULL, A(cmd, "--foreground", "--dir", src, "--node", "x",
						  "--cookie-file", path, "--bridge", "nats",
						  "--bridge-opt", "bogus=1")), 0);
	th_expect_in(f->o->err, "unknown option 'bogus'");
#endif
}

/* ---- help and man pages ----------------------------------------------- */

/* The command words of procreg --help: lines "  WORD ..." under
 * "Commands:". Space-separated, each followed by a space. */
static void help_commands(const char *help, char *out, size_t len)
{
	const char *p = strstr(help, "Commands:\n");

	out[0] = 0;
	assert_non_null(p);
	for (p = strchr(p, '\n') + 1; *p && *p != '\n'; p = strchr(p, '\n') + 1) {
		char word[64];

		if (sscanf(p, "  %63[a-z]", word) == 1 && p[2] != ' ' && !strstr(out, word)) {
			strncat(out, word, len - strlen(out) - 2);
			strcat(out, " ");
		}
	}
}

/* The command words of the man page: the first word of each ".B" line
 * after a ".TP" in the COMMANDS section. */
static void man_commands(const char *man, char *out, size_t len)
{
	const char *p = strstr(man, "\n.SH COMMANDS\n"), *end;

	out[0] = 0;
	assert_non_null(p);
	end = strstr(p + 1, "\n.SH ");
	for (p = strstr(p, "\n.TP\n.B "); p && (!end || p < end); p = strstr(p + 1, "\n.TP\n.B ")) {
		char word[64];

		if (sscanf(p, "\n.TP\n.B %63[a-z]", word) == 1 && !strstr(out, word)) {
			strncat(out, word, len - strlen(out) - 2);
			strcat(out, " ");
		}
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every "--long-option" in TEXT (troff's \- taken as -), sorted. */
static void long_options(const char *text, char *out, size_t len)
{
	char *words[128];
	int n = 0;

	out[0] = 0;
	for (const char *p = text; *p; p++) {
		char w[64];
		size_t k = 0;

		if (!(p[0] == '-' && p[1] == '-') && !(!strncmp(p, "\\-\\-", 4)))
			continue;
		p += p[0] == '-' ? 2 : 4;
		while (k < sizeof(w) - 1 && ((*p >= 'a' && *p <= 'z') || *p == '-' ||
					     (p[0] == '\\' && p[1] == '-'))) {
			if (*p == '\\')
				p++;
			w[k++] = *p++;
		}
		w[k] = 0;
		if (k < 2 || n == 128)
			continue;
		bool seen = false;
		for (int i = 0; i < n; i++)
			seen |= !strcmp(words[i], w);
		if (!seen)
			words[n++] = strdup(w);
	}
	qsort(words, (size_t)n, sizeof(char *), cmp_str);
	for (int i = 0; i < n; i++) {
		strncat(out, words[i], len - strlen(out) - 2);
		strcat(out, " ");
		free(words[i]);
	}
}

/* Sort a space-separated word list in place. */
static void sort_words(char *s)
{
	char *w[64], buf[1024] = "", *save = NULL;
	int n = 0;

	for (char *t = strtok_r(s, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save))
		w[n++] = t;
	qsort(w, (size_t)n, sizeof(char *), cmp_str);
	for (int i = 0; i < n; i++) {
		strcat(buf, w[i]);
		strcat(buf, " ");
	}
	strcpy(s, buf);
}

static void test_help_matches_man(void **state)
{
	struct fx *f = *state;
	char from_help[1024], from_man[1024], *man, *help;
	char opts_help[2048], opts_man[2048];

	assert_int_equal(th_run(f->o, NULL, A(PROCREG_CLI_PATH, "--help")), 0);
	help = strdup(f->o->out);
	help_commands(help, from_help, sizeof(from_help));
	man = th_read_file(PROCREG_BUILD_DIR "/man/procreg.1", true);
	man_commands(man, from_man, sizeof(from_man));
	sort_words(from_help);
	sort_words(from_man);
	assert_string_equal(from_help, from_man);
	th_expect_in(from_help, "check ");
	th_expect_in(from_help, "readers ");
	th_expect_in(from_help, "top ");
	/* The options each names. */
	long_options(help, opts_help, sizeof(opts_help));
	long_options(man, opts_man, sizeof(opts_man));
	assert_string_equal(opts_help, opts_man);

	/* --help on every command prints the same usage. */
	{
		char *save = NULL, *cmds = strdup(from_help);

		for (char *c = strtok_r(cmds, " ", &save); c; c = strtok_r(NULL, " ", &save)) {
			assert_int_equal(th_run(f->o, NULL, A(PROCREG_CLI_PATH, c, "--help")), 0);
			if (strcmp(f->o->out, help))
				fail_msg("procreg %s --help differs from procreg --help", c);
		}
		free(cmds);
	}
	free(man);
	free(help);

	/* procregd: the options of --help and of procregd(8). */
	assert_int_equal(th_run(f->o, NULL, A(PROCREGD_PATH, "--help")), 0);
	long_options(f->o->out, opts_help, sizeof(opts_help));
	man = th_read_file(PROCREG_BUILD_DIR "/man/procregd.8", true);
	/* The man page's options: its OPTIONS section. */
	*strstr(strstr(man, "\n.SH OPTIONS\n") + 1, "\n.SH ") = 0;
	long_options(strstr(man, "\n.SH OPTIONS\n"), opts_man, sizeof(opts_man));
	assert_string_equal(opts_help, opts_man);
	free(man);
}

/* ---- socket activation ------------------------------------------------ */

static int listening_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	assert_true(fd >= 0);
	assert_true(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) < (int)sizeof(sa.sun_path));
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

/* procregd --foreground --dir DIR with FD as fd 3, LISTEN_FDS=1 and
 * LISTEN_PID = its own pid (or OTHER_PID), as systemd starts it. */
static pid_t start_activated(struct fx *f, int fd, bool other_pid)
{
	char log[600];
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char buf[32];
		int lf;

		snprintf(log, sizeof(log), "%s/procregd.log", f->dir);
		lf = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (lf >= 0)
			dup2(lf, 2);
		if (fd != 3) {
			dup2(fd, 3);
			close(fd);
		}
		snprintf(buf, sizeof(buf), "%d", (int)getpid() + (other_pid ? 1 : 0));
		setenv("LISTEN_PID", buf, 1);
		setenv("LISTEN_FDS", "1", 1);
		unsetenv("PROCREG_DIR");
		unsetenv("PROCREG_SCOPE");
		unsetenv("PROCREG_SOCKET");
		execl(PROCREGD_PATH, "procregd", "--foreground", "--dir", f->dir, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int serving(void *p)
{
	struct fx *f = p;
	PROCREG_OPTS(procreg_stats, s);
	procreg_t *r = th_open(f->dir);

	if (!r)
		return 0;
	procreg_stats(r, &s);
	procreg_close(r);
	return s.daemon_pid == f->activated;
}

/* Start procregd with FD passed (see start_activated), wait until it
 * serves, register NAME through it and check the socket clients were
 * told is WANT_SOCK. */
static void activate_and_use(struct fx *f, int fd, bool other_pid, const char *name,
			     const char *want_sock)
{
	TH_ENTRY(e);
	procreg_t *reg;

	f->activated = start_activated(f, fd, other_pid);
	close(fd);
	assert_true(th_until(serving, f, 20000));
	reg = th_open(f->dir);
	assert_non_null(reg);
	assert_int_equal(procreg_register(reg, name, "x", 1), 0);
	assert_string_equal(procreg_socket_path(reg), want_sock);
	assert_int_equal(procreg_lookup(reg, name, &e), 0);
	assert_int_equal(e.pid, getpid());
	procreg_close(reg);
}

static void stop_activated(struct fx *f)
{
	assert_int_equal(kill(f->activated, SIGTERM), 0);
	assert_int_equal(th_wait(f->activated), 0);
	f->activated = 0;
}

static void test_socket_activation(void **state)
{
	struct fx *f = *state;
	char sock[600], own[600];
	struct stat st;
	int fd;

	snprintf(sock, sizeof(sock), "%s/activated.sock", f->dir);
	snprintf(own, sizeof(own), "%s/procreg.default.sock", f->dir);
	/* Clients are told the passed socket, and are served on it; the
	 * daemon binds none of its own. */
	activate_and_use(f, listening_socket(sock), false, "act.one", sock);
	assert_int_equal(stat(own, &st), -1);

	/* A clean stop leaves the manager's socket where it is. */
	stop_activated(f);
	assert_int_equal(stat(sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));

	/* LISTEN_PID of another process: not ours, so bind our own. */
	activate_and_use(f, socket(AF_UNIX, SOCK_SEQPACKET, 0), true, "act.two", own);

	/* A passed fd that is not a listening seqpacket socket: refused. */
	stop_activated(f);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	{
		pid_t pid = start_activated(f, fd, false);

		close(fd);
		assert_int_equal(th_wait(pid), 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_installed_package, setup, teardown),
		cmocka_unit_test_setup_teardown(test_help_matches_man, setup, teardown),
		cmocka_unit_test_setup_teardown(test_socket_activation, setup, teardown),
	};

	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
