/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_backend_null.c - a bridge backend in a shared object, for
 * test_bridge: it connects to nobody. Its fd is an eventfd that never
 * fires; it counts what it is given to carry. Built twice: as is, and
 * with NULL_BACKEND_TOO_SMALL, claiming an interface size procregd must
 * refuse.
 */
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "procreg/backend.h"

struct null_backend {
	int fd;
	struct pr_bridge_up up;
	unsigned long frames;
};

static void *null_open(const struct pr_bridge_config *c, const struct pr_bridge_up *up, int *err)
{
	struct null_backend *b = calloc(1, sizeof(*b));

	(void)c;
	if (!b || (b->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		free(b);
		*err = -1;
		return NULL;
	}
	b->up = *up;
	b->up.log("null backend: open");
	*err = 0;
	return b;
}

static int null_fd(void *b)
{
	return ((struct null_backend *)b)->fd;
}

static void null_dispatch(void *b)
{
	(void)b;
}

static int null_broadcast(void *b, const uint8_t *frame, size_t len)
{
	(void)frame;
	(void)len;
	((struct null_backend *)b)->frames++;
	return 0;
}

static void null_flush(void *b)
{
	(void)b;
}

static void null_nodes(void *b, void (*cb)(void *arg, const struct pr_bridge_node_info *n),
		       void *arg)
{
	(void)b;
	(void)cb;
	(void)arg;
}

static void null_close(void *p)
{
	struct null_backend *b = p;

	b->up.log("null backend: close after %lu frames", b->frames);
	close(b->fd);
	free(b);
}

__attribute__((visibility("default"))) const struct pr_bridge_backend procreg_bridge_backend_v1 = {
#ifdef NULL_BACKEND_TOO_SMALL
	.sz = offsetof(struct pr_bridge_backend, nodes),
#else
	.sz = sizeof(struct pr_bridge_backend),
#endif
	.name = "null",
	.open = null_open,
	.fd = null_fd,
	.dispatch = null_dispatch,
	.broadcast = null_broadcast,
	.flush = null_flush,
	.nodes = null_nodes,
	.close = null_close,
};
