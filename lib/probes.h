/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * probes.h - USDT probes (<sys/sdt.h>) on the library's and procregd's
 * hot paths, for procreg-trace and any other USDT consumer.
 *
 * Every probe has an is-enabled semaphore: a 16-bit counter in the
 * .probes section that the kernel raises while a uprobe is attached to the
 * probe (libbpf passes its address as the uprobe's ref_ctr_offset). Code
 * tests it before doing anything a probe needs, so an untraced probe costs
 * a load of a variable of our own and a branch that is not taken: no
 * syscall, no clock read, no shared write. Clock reads for latency happen
 * only while the semaphore says a tracer is attached.
 *
 * A semaphore is static to the one file that fires its probe (sdt.h names
 * it provider_name_semaphore): each probe below is fired from one file.
 *
 * Probe names and arguments are a stable interface, documented in
 * README.md ("Tracing") and tools/procreg-trace/procreg-trace.8. Built
 * with -DPROCREG_USDT=OFF, every probe compiles to nothing and every
 * PR_PROBE_ENABLED() to 0.
 */
#ifndef PROCREG_PROBES_H
#define PROCREG_PROBES_H

#ifdef PROCREG_USDT
#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1
/* Arguments in registers or as constants, never in memory: a memory
 * operand may take an index register (8@352(%rsp,%rax), an argument in an
 * array on the stack), which libbpf could not read until 2025 (Debian
 * 12's 1.1 cannot), and procreg-trace then fails to attach to the probe.
 * x86-64 only; elsewhere sdt.h's own choice stands. */
#if defined(__x86_64__) && !defined(STAP_SDT_ARG_CONSTRAINT)
#define STAP_SDT_ARG_CONSTRAINT nr
#endif
#include <sys/sdt.h>

/* Define the semaphore of PROVIDER:NAME, once, in the file that fires it. */
#define PR_PROBE_DEFINE(provider, name)                                                      \
	__extension__ static volatile unsigned short provider##_##name##_semaphore          \
		__attribute__((unused, section(".probes")))
/* Non-zero while a tracer is attached to PROVIDER:NAME. */
#define PR_PROBE_ENABLED(provider, name) __builtin_expect(provider##_##name##_semaphore != 0, 0)
/* Fire it (arguments: integers or pointers, up to 12). */
#define PR_PROBE(provider, name, ...) STAP_PROBEV(provider, name, __VA_ARGS__)
#else
#define PR_PROBE_DEFINE(provider, name) struct pr_probe_unused_##provider##_##name
#define PR_PROBE_ENABLED(provider, name) 0
static inline void pr_probe_nop(int x, ...)
{
	(void)x;
}
#define PR_PROBE(provider, name, ...) pr_probe_nop(0, __VA_ARGS__)
#endif

/* Fire PROVIDER:NAME if a tracer is attached. The arguments are evaluated
 * only then. */
#define PR_TRACE(provider, name, ...)                                                        \
	do {                                                                                 \
		if (PR_PROBE_ENABLED(provider, name))                                        \
			PR_PROBE(provider, name, __VA_ARGS__);                               \
	} while (0)

/* A clock read for a probe's latency argument: 0 unless PROVIDER:NAME is
 * traced. */
#define PR_TRACE_CLOCK(provider, name) (PR_PROBE_ENABLED(provider, name) ? procreg__mono_ns() : 0)

#endif /* PROCREG_PROBES_H */
