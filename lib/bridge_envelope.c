/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bridge_envelope.c - seal and open NATS envelopes on byte buffers (the
 * format: bridge_envelope.h). The input comes from anyone on the NATS
 * server: every read below is bounded by the message's length, and no
 * field is believed before the MAC over all of them checks out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "bridge_envelope.h"
#include "byteorder.h"

struct pr_env_key {
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx;           /* keyed; duplicated per message */
};

int procreg__env_key_new(const uint8_t *cookie, size_t len, struct pr_env_key **out)
{
	struct pr_env_key *k = calloc(1, sizeof(*k));
	OSSL_PARAM params[2];

	*out = NULL;
	if (!k)
		return -ENOMEM;
	k->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	k->ctx = k->mac ? EVP_MAC_CTX_new(k->mac) : NULL;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	/* EVP_MAC_init keeps its own copy of the key. */
	if (!k->ctx || !EVP_MAC_init(k->ctx, cookie, len, params)) {
		procreg__env_key_free(k);
		return -EIO;
	}
	*out = k;
	return 0;
}

void procreg__env_key_free(struct pr_env_key *k)
{
	if (!k)
		return;
	EVP_MAC_CTX_free(k->ctx);
	EVP_MAC_free(k->mac);
	free(k);
}

/* HMAC-SHA256 over u16 subject_len, subject, DATA[0..len). */
static int env_mac(const struct pr_env_key *k, const char *subject, const uint8_t *data,
		   size_t len, uint8_t out[PR_BP_MAC])
{
	EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->ctx);
	size_t sl = strlen(subject), outlen = 0;
	uint8_t l[2];
	int ok;

	if (!c)
		return -ENOMEM;
	pr_put16(l, (uint16_t)sl);
	ok = EVP_MAC_update(c, l, 2) && EVP_MAC_update(c, (const uint8_t *)subject, sl) &&
	     EVP_MAC_update(c, data, len) && EVP_MAC_final(c, out, &outlen, PR_BP_MAC) &&
	     outlen == PR_BP_MAC;
	EVP_MAC_CTX_free(c);
	return ok ? 0 : -EIO;
}

size_t procreg__env_size(const struct pr_env *e)
{
	return PR_ENV_FIXED + e->sender_len + e->body_len + PR_BP_MAC;
}

int procreg__env_seal(const struct pr_env_key *k, const char *subject, const struct pr_env *e,
		      uint8_t *buf, size_t cap, size_t *len)
{
	size_t pos = 0, need;
	int err;

	if (e->type == 0 || e->type >= PR_ENV_TYPES ||
	    !procreg__bp_valid_node(e->sender, e->sender_len) || e->body_len > PR_BP_FRAME_MAX ||
	    strlen(subject) > PR_ENV_SUBJECT_MAX)
		return -EINVAL;
	need = procreg__env_size(e);
	if (need > cap)
		return -ENOBUFS;
	memcpy(buf, PR_ENV_MAGIC, 4);
	pos = 4;
	buf[pos++] = e->type;
	buf[pos++] = e->flags;
	buf[pos++] = (uint8_t)e->sender_len;
	memcpy(buf + pos, e->sender, e->sender_len);
	pos += e->sender_len;
	pr_put64(buf + pos, e->incarnation);
	pr_put64(buf + pos + 8, e->counter);
	pr_put64(buf + pos + 16, e->req);
	pos += 24;
	if (e->body_len)
		memcpy(buf + pos, e->body, e->body_len);
	pos += e->body_len;
	err = env_mac(k, subject, buf, pos, buf + pos);
	if (err)
		return err;
	*len = pos + PR_BP_MAC;
	return 0;
}

int procreg__env_open(const struct pr_env_key *k, const char *subject, const uint8_t *buf,
		      size_t len, struct pr_env *e)
{
	uint8_t mac[PR_BP_MAC];
	size_t sl, at;
	int err;

	if (len < PR_ENV_FIXED + 1 + PR_BP_MAC || memcmp(buf, PR_ENV_MAGIC, 4))
		return -ENOMSG;
	sl = buf[6];
	if (len < PR_ENV_FIXED + sl + PR_BP_MAC ||
	    len - (PR_ENV_FIXED + sl + PR_BP_MAC) > PR_BP_FRAME_MAX ||
	    !procreg__bp_valid_node((const char *)buf + 7, sl) ||
	    strlen(subject) > PR_ENV_SUBJECT_MAX)
		return -EBADMSG;
	err = env_mac(k, subject, buf, len - PR_BP_MAC, mac);
	if (err)
		return err;
	if (CRYPTO_memcmp(mac, buf + len - PR_BP_MAC, PR_BP_MAC) != 0)
		return -EACCES;
	/* Authenticated: from a node with the cookie. */
	if (buf[4] == 0 || buf[4] >= PR_ENV_TYPES)
		return -EPROTONOSUPPORT;
	at = 7 + sl;
	*e = (struct pr_env){
		.type = buf[4],
		.flags = buf[5],
		.sender = (const char *)buf + 7,
		.sender_len = sl,
		.incarnation = pr_get64(buf + at),
		.counter = pr_get64(buf + at + 8),
		.req = pr_get64(buf + at + 16),
		.body = buf + at + 24,
		.body_len = len - PR_ENV_FIXED - sl - PR_BP_MAC,
	};
	return 0;
}
