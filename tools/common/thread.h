/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * thread.h - procregd's helper threads (the closer, the mesh's resolver):
 * started detached, every signal blocked in them.
 */
#ifndef PROCREG_TOOLS_THREAD_H
#define PROCREG_TOOLS_THREAD_H

/* A detached thread running FN(ARG): 0 or a negative errno. Signals are
 * blocked in it: procregd takes SIGTERM and SIGINT through a signalfd,
 * and the kernel would deliver one to any thread that had them open. */
int pr_thread_start(void *(*fn)(void *), void *arg);

#endif /* PROCREG_TOOLS_THREAD_H */
