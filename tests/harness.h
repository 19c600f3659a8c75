/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * harness.h - what the process-level tests share: temporary table
 * directories, real procregd processes, child processes, the CLI.
 *
 * Every test works in its own directory under /tmp (given to procregd
 * with --dir, which also holds the socket), and removes it at the end:
 * nothing is left behind in /dev/shm.
 */
#ifndef PROCREG_TEST_HARNESS_H
#define PROCREG_TEST_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "procreg.h"

/* A procreg_entry with room for any metadata (a lookup copies it into
 * NAME_meta), for tests that read it. */
#define TH_ENTRY(NAME)                                   \
	unsigned char NAME##_meta[PROCREG_META_MAX];     \
	PROCREG_OPTS(procreg_entry, NAME, .meta = NAME##_meta, .meta_size = sizeof(NAME##_meta))

/* Copy SRC, an entry a callback was given, into DST (a sized entry): its
 * metadata goes to DST's .meta, whose room (.meta_size) stays DST's. */
void th_entry_copy(struct procreg_entry *dst, const struct procreg_entry *src);
/* BYTE over everything a lookup fills in E (its metadata buffer too), so
 * that a test sees what the lookup wrote; what the caller sets stays. */
void th_entry_scribble(struct procreg_entry *e, int byte);

/* Built with AddressSanitizer or ThreadSanitizer (as the daemon then
 * is): ASan's quarantine holds freed memory back, and TSan's shadow and
 * history grow with the memory touched, so RSS says nothing about leaks;
 * LeakSanitizer does, at the daemons' exit, in the ASan run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif
/* What a test that skips its memory bound for it says. */
#define TH_RSS_UNBOUNDED \
	"not bounded in a sanitizer's build (ASan's quarantine keeps freed memory; TSan's shadow grows with the memory touched)"

struct th_daemon {
	pid_t pid;                 /* 0 when not running */
	char dir[256];
	char scope[64];
	char log[300];             /* its stderr */
};

/* A fresh directory; the caller frees the string after th_rmrf(). */
char *th_mkdtemp(void);
/* The whole of file PATH, NUL-terminated (free it). A file that cannot be
 * read fails the test if MUST, else reads as "". */
char *th_read_file(const char *path, bool must);
/* Fail the test, showing HAY, unless NEEDLE is in it. */
void th_expect_in(const char *hay, const char *needle);
void th_rmrf(const char *dir);

/* Start procregd --foreground --dir DIR [ARGS...] (NULL-terminated), with
 * extra environment ENV ("K=V" strings, NULL-terminated, may be NULL).
 * Returns 0 once the daemon serves (its pid is in the table header). */
int th_daemon_start(struct th_daemon *d, const char *dir, const char *const *args,
		    const char *const *env);
/* The same, its stderr appended to LOG instead of DIR/procregd.log. */
int th_daemon_start_log(struct th_daemon *d, const char *dir, const char *log,
			const char *const *args, const char *const *env);
/* The same for scope SCOPE ("--scope SCOPE"; NULL: the default). */
int th_daemon_start_scope(struct th_daemon *d, const char *dir, const char *scope,
			  const char *log, const char *const *args, const char *const *env);
/* SIGTERM and wait: the exit status. */
int th_daemon_stop(struct th_daemon *d);
/* SIGKILL and wait. */
void th_daemon_kill(struct th_daemon *d);
/* Print the log at PATH to stderr (on failure, to see why). */
void th_dump_log(const char *path);
/* Print the daemon's log. */
void th_daemon_dump_log(const struct th_daemon *d);
/* th_daemon_stop() if it runs (0 if not), its log printed unless it
 * exited 0: the exit status. */
int th_daemon_stop_dump(struct th_daemon *d);

procreg_t *th_open(const char *dir);
/* th_open for scope SCOPE. */
procreg_t *th_open_scope(const char *dir, const char *scope);

/* The usual fixture: a fresh directory (mode 0755, so that a test may act
 * as another uid), a daemon serving it with ARGS and ENV, and a handle. */
struct th_fx {
	char *dir;
	struct th_daemon d;
	procreg_t *reg;
};

/* cmocka setup and teardown: *STATE is the struct th_fx. The teardown
 * stops the daemon (it must exit 0) and removes the directory. */
int th_fx_start(void **state, const char *const *args, const char *const *env);
int th_fx_stop(void **state);

/* Fork a child that runs FN(ARG) and exits with its return value. */
pid_t th_fork(int (*fn)(void *), void *arg);
/* Wait for PID: its exit status, or 128 + signal. */
int th_wait(pid_t pid);
/* The same for at most MS milliseconds: then -1, PID killed and waited
 * for. */
int th_wait_ms(pid_t pid, int ms);
/* SIGKILL *PID (if > 0) and wait for it; *PID is 0 after. */
void th_kill_wait(pid_t *pid);
/* The system call PID (its main thread) is blocked in, or -1 if it runs
 * (/proc/PID/syscall). */
long th_blocked_in(pid_t pid);

/* Run the CLI with DIR as --dir: ARGS is NULL-terminated. Captures up to
 * OUTLEN-1 bytes of stdout into OUT (may be NULL). Returns the exit status. */
int th_cli(const char *dir, char *out, size_t outlen, const char *const *args);
/* ARGV (room for CAP pointers) := the CLI, "--dir DIR" unless DIR is
 * NULL, then ARGS (NULL-terminated), cut to fit; NULL-terminated. */
void th_cli_argv(const char **argv, size_t cap, const char *dir, const char *const *args);

/* Run ARGV[0] (a path) with ARGV, with extra environment ENV ("K=V", or
 * "K" alone to unset K; NULL-terminated, may be NULL) and with
 * PROCREG_DIR, PROCREG_SCOPE and PROCREG_SOCKET unset. Captures stdout and
 * stderr (each up to its cap, NUL-terminated). Fails the test if it runs
 * longer than 60 s. Returns the exit status (128 + signal). */
struct th_out {
	char out[65536];
	char err[16384];
};
int th_run(struct th_out *o, const char *const *env, const char *const *argv);
/* th_run into buffers of the caller's (OUT, ERR of OUTCAP, ERRCAP
 * bytes), failing the test after LIMIT_MS. */
int th_run_into(char *out, size_t outcap, char *err, size_t errcap, int limit_ms,
		const char *const *env, const char *const *argv);
/* Read what FD has into BUF (capacity CAP, kept NUL-terminable), *GOT
 * bytes so far; *OPEN_ turns 0 at end of file. */
void th_drain(int fd, char *buf, size_t cap, size_t *got, int *open_);
/* In a child about to exec: apply ENV as th_run does ("K=V" sets, "K"
 * unsets). */
void th_apply_env(const char *const *env);
/* Copy a file byte for byte (mode 0644). */
void th_copy_file(const char *from, const char *to);
/* A copy of DIR's default-scope table in the new directory DIR/SUB: its
 * path into TABLE (LEN bytes). */
void th_copy_table(const char *dir, const char *sub, char *table, size_t len);
/* Write V at byte OFF of the file at PATH (a table copy being damaged). */
void th_poke_u64(const char *path, uint64_t off, uint64_t v);

/* xorshift64: a deterministic pseudo-random sequence from *S (not 0). */
uint64_t th_xorshift(uint64_t *s);
/* An exact-size heap copy of BUF[0..len) (free() it): under
 * AddressSanitizer, a read one past its end is caught. */
uint8_t *th_exact(const uint8_t *buf, size_t len);

/* A loopback TCP port nobody listens on now (bind port 0, read it back):
 * another process may take it before the caller binds it. */
int th_free_port(void);
/* Write TEXT to PATH (created or truncated) with MODE. */
void th_write_file(const char *path, const char *text, mode_t mode);
/* Whether the file PATH (its first 1 MiB) contains NEEDLE. */
int th_log_has(const char *path, const char *needle);
/* How many times NEEDLE is in the file PATH (its first 1 MiB). */
int th_log_count(const char *path, const char *needle);
/* The counts the file PATH gives of lines held back of the kind WHAT
 * (procregd's "(N more WHAT in the last second)"), added up. */
uint64_t th_log_held(const char *path, const char *what);

/* A raw connection to the socket of the daemon of DIR (scope default),
 * and its HELLO (with this process's pidfd), which must be accepted. */
int th_raw_connect(const char *dir);
void th_raw_hello(int fd);
/* The same without cmocka (for a child): -1 when refused. */
int th_raw_try_connect(const char *dir);
int th_raw_try_hello(int fd);
/* The same, HELLO with FLAGS (PR_HELLO_*); the reply's arm into *ARM
 * (may be NULL). */
int th_raw_try_hello_flags(int fd, uint32_t flags, uint64_t *arm);
/* An ARM with word ARM, alone in its packet: 0, or -1 if not all sent. */
int th_raw_try_arm(int fd, uint64_t arm);
/* Send BUF[0..LEN) on S with FD as SCM_RIGHTS (MSG_NOSIGNAL): sendmsg's
 * result. */
ssize_t th_send_fd(int s, const void *buf, size_t len, int fd);

/*
 * Unprivileged users for attack tests. th_user_new() creates a system
 * account of its own (useradd: no home, no login shell, no supplementary
 * group) named "prt-PID-N", so that what runs as it has no privilege and
 * shares its uid with nothing on the host; accounts left by a test run
 * that was killed are removed by the next run. Needs root: it fails the
 * test otherwise. th_user_del() removes the account (the test's teardown
 * should; an exit handler does it for those that were not).
 */
struct th_user {
	uid_t uid;
	gid_t gid;
	char name[32];
};
void th_user_new(struct th_user *u);
void th_user_del(struct th_user *u);
/* In a child: become U for good (groups, gid, uid; no capability left).
 * Exits with status 99 if any step fails, so a test never runs its attack
 * as root by mistake. */
void th_become(const struct th_user *u);

/* In a child: become U as procregd@.service runs it: CAP_KILL its only
 * capability, ambient (what it execs keeps it), and bounding. Exits with
 * status 99 if any step fails. */
void th_become_kill(const struct th_user *u);

/*
 * Daemons as a system user. With PROCREG_TEST_SYSUSER set (not empty or
 * 0: the integration tests' "_sysuser" entries), th_daemon_start*() run
 * procregd as an unprivileged user the test process creates once
 * (th_user_new), with CAP_KILL alone, ambient, as procregd@.service does,
 * after giving it the table directory (th_daemon_user_dir). Clients trust
 * its tables by the rule procregd@.service relies on: PROCREG_DAEMON_USER,
 * set in this process's environment (so in every child's), names it. No
 * PROCREG_TRUST_UID is involved.
 */
/* That user, or NULL when daemons run as the test (root). */
const struct th_user *th_daemon_user(void);
/* Hand DIR (a test's own directory, root's) to U, which procregd
 * requires of a table directory that is not root's shared, sticky one. */
void th_daemon_user_dir(const char *dir, const struct th_user *u);
/* Give PATH, a file the test made for its daemon to use as its own (a
 * journal, a notify socket), to that user; nothing when daemons run as
 * the test. */
void th_daemon_own(const char *path);
/* The uid daemons run as: the daemon user's, else ours. */
uid_t th_daemon_uid(void);
/* th_run of procregd (ARGV) as th_daemon_start runs it: as the daemon
 * user, if there is one, its --dir handed over. */
int th_run_daemon(struct th_out *o, const char *const *env, const char *const *argv);
/* th_run as AS (th_become_kill), or as the test if AS is NULL. */
int th_run_as(struct th_out *o, const struct th_user *as, const char *const *env,
	      const char *const *argv);

/* Wait (up to 20 s) until the daemon serving REG holds PID's reader pages
 * (its registry in the table lists PID): reader pages are handed over
 * without waiting, so a test that counts the daemon's fds or readers
 * waits for this first. 0, or -ETIMEDOUT. */
int th_reader_held(procreg_t *reg, pid_t pid);
/* The same, until it holds PAGES pages of PID's. */
int th_reader_pages(procreg_t *reg, pid_t pid, unsigned pages);

/* Zeroed memory shared with forked children (munmap it with LEN). */
void *th_shared(size_t len);

/*
 * Processes held at a point until the test lets them go: each runs
 * FN(ARG, 0) (set up: open, read once, ...), says it is ready, waits until
 * th_held_release(), then runs FN(ARG, 1) and exits with what it returned
 * (or with the first call's, if that failed). FN keeps what it needs
 * between its two calls in the child's own memory.
 */
#define TH_HELD_MAX 64
struct th_held {
	int ready[2], hold[2];
	pid_t pid[TH_HELD_MAX];
	int n, ready_seen;
};
void th_held_init(struct th_held *h);
pid_t th_held_start(struct th_held *h, int (*fn)(void *arg, int phase), void *arg);
/* Wait (up to MS ms) until every process started since the last call is
 * ready; fails the test if one is not (it failed in its first call). */
void th_held_ready(struct th_held *h, int ms);
/* Let them go, and wait for each: 0 if every one exited 0, else the
 * first non-zero status. */
int th_held_release(struct th_held *h);
/* SIGKILL what is still held (a teardown after a failed assert). */
void th_held_kill(struct th_held *h);

/* Tests that are their own writer (struct pr_writer, no procregd) and run
 * readers beside it: th_reader_page() makes the reader's first read (a
 * slot, in a page of its own) and returns that page's fd; the writer's
 * process takes it with th_adopt_page() as procregd takes a page handed
 * over (pidfd_getfd, the same checks and mapping), and returns its index
 * among the writer's pages. From then on its grace periods wait for that
 * reader, as procregd's would. */
struct pr_writer;
/* Be the writer of SCOPE's table in DIR (made MAX_SIZE bytes if new, 64
 * reader processes, mode 0600); fails the test if it cannot. */
void th_writer_open(struct pr_writer *w, const char *dir, const char *scope, uint64_t max_size);
int th_reader_page(procreg_t *r);
size_t th_adopt_page(struct pr_writer *w, pid_t pid, int fdnum);

/* Sleep for MS milliseconds. */
void th_msleep(int ms);
/* The next fork gets PID, unless another fork on the host takes it first
 * (then set it again). Needs root: /proc/sys/kernel/ns_last_pid. */
void th_next_pid(pid_t pid);
/* procregd changes the table, then publishes the change's event: a test
 * that saw a change made by the daemon on its own (a peer's frame, a
 * death, a timer) may read the feed before that event is in. This round
 * trip returns once the dispatch that made the change has ended, so the
 * feed holds its events; fails the test if the daemon does not answer. */
void th_feed_settle(procreg_t *reg);
/* Poll COND-like function until it returns non-zero, up to MS ms. */
int th_until(int (*fn)(void *), void *arg, int ms);
/* For th_until: whether the process *(pid_t *)PID is stopped (state 'T'
 * in /proc/PID/stat). */
int th_stopped(void *pid);
/* For th_until: whether our child *(pid_t *)PID has exited (reaped). */
int th_exited(void *pid);
/* For th_until: whether procreg_readers() on REG lists process PID. A
 * process's first lookup hands the daemon its reader pages without
 * waiting for it, so a reader is listed some time after that lookup. */
struct th_reader_wait {
	procreg_t *reg;
	pid_t pid;
};
int th_reader_listed(void *wait);

#endif
