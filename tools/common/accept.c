/* SPDX-License-Identifier: BSD-2-Clause */
/* accept.c - see accept.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "accept.h"

int pr_accept_spare(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int pr_accept(int lfd, struct sockaddr *sa, socklen_t *len, int flags, int *spare,
	      void (*shed)(int fd, void *arg), void *arg)
{
	int fd = accept4(lfd, sa, len, flags), err;

	if (fd >= 0 || (errno != EMFILE && errno != ENFILE) || *spare < 0)
		return fd;
	close(*spare);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	err = errno;
	if (fd >= 0 && shed)
		shed(fd, arg);
	else if (fd >= 0)
		close(fd);
	*spare = pr_accept_spare();
	if (fd >= 0)
		return PR_ACCEPT_SHED;
	errno = err;
	return -1;
}
