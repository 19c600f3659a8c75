/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * accept.h - accepting connections when the process is out of file
 * descriptors: procregd's client socket (server.c) and the bridge's TCP
 * port (mesh.c).
 */
#ifndef PROCREG_TOOLS_ACCEPT_H
#define PROCREG_TOOLS_ACCEPT_H

#include <sys/socket.h>

/* pr_accept() took a connection it had no fd for and closed it. */
#define PR_ACCEPT_SHED (-2)

/*
 * accept4(LFD, SA, LEN, FLAGS). When the process is out of file
 * descriptors (EMFILE, ENFILE), the connection would stay in the queue,
 * the socket readable and an edge- or level-triggered loop spinning on
 * it: so *SPARE, an fd kept open for this (on /dev/null), is closed, the
 * connection taken with the fd that frees and closed (its peer sees the
 * connection end), and *SPARE opened again. Returns the new fd;
 * PR_ACCEPT_SHED when a connection was shed so (the caller logs a
 * refusal and accepts again); -1 with errno otherwise (EAGAIN: none
 * waiting; EMFILE with *SPARE -1: no spare to shed with).
 *
 * SHED, if not NULL, is given the shed connection instead of close():
 * closing a unix socket releases the files of packets queued on it, and
 * such a file's last close may wait (closer.c). *SPARE is then -1 until
 * SHED's taker has closed it and the caller opens another.
 */
int pr_accept(int lfd, struct sockaddr *sa, socklen_t *len, int flags, int *spare,
	      void (*shed)(int fd, void *arg), void *arg);

/* A spare fd for pr_accept(), -1 if none could be had. */
int pr_accept_spare(void);

#endif /* PROCREG_TOOLS_ACCEPT_H */
