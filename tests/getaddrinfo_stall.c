/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * getaddrinfo_stall.c - preloaded into procregd by test_bridge: a name
 * under "stall.test" looked up for real (not AI_NUMERICHOST) never
 * resolves, as with a DNS server that does not answer. Before stalling,
 * it creates the file PROCREG_TEST_STALL_MARK names, so that the test
 * knows a look-up is under way. Everything else goes to the real
 * getaddrinfo().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int stalls(const char *node, const struct addrinfo *hints)
{
	static const char suffix[] = "stall.test";
	size_t nl = node ? strlen(node) : 0, sl = sizeof(suffix) - 1;

	if (hints && (hints->ai_flags & AI_NUMERICHOST))
		return 0;
	return nl >= sl && !strcmp(node + nl - sl, suffix);
}

__attribute__((visibility("default")))
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

	if (stalls(node, hints)) {
		const char *mark = getenv("PROCREG_TEST_STALL_MARK");
		int fd = mark ? open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;

		if (fd >= 0)
			close(fd);
		for (;;)
			pause();
	}
	*(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
	if (!real)
		return EAI_SYSTEM;
	return real(node, service, hints, res);
}
