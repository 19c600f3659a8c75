/* SPDX-License-Identifier: BSD-2-Clause */
/* thread.c - see thread.h. */
#include <pthread.h>
#include <signal.h>

#include "thread.h"

int pr_thread_start(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t tid;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = -pthread_create(&tid, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}
