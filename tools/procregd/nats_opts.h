/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * nats_opts.h - the NATS backend's options, in one place: nats.c takes
 * each as --bridge-opt KEY=VALUE (and refuses any other key), and
 * procregd offers each as --nats-KEY VALUE too, a documented alias that
 * becomes --bridge-opt KEY=VALUE (and picks --bridge nats). Their
 * defaults are here as well, for nats.c and procregd's --help.
 *
 * PR_NATS_OPTS(X) calls X(ID, "key") once per option.
 */
#ifndef PROCREGD_NATS_OPTS_H
#define PROCREGD_NATS_OPTS_H

#define PR_NATS_OPTS(X)                                                                        \
	X(URL, "url")                   /* the servers, URL[,URL...] */                        \
	X(USER, "user")                 /* with password */                                    \
	X(PASSWORD, "password")                                                                \
	X(TOKEN, "token")                                                                      \
	X(CREDS, "creds")               /* a credentials file */                               \
	X(NKEY, "nkey")                 /* the public key, with nkey-seed: its seed's file */ \
	X(NKEY_SEED, "nkey-seed")                                                              \
	X(SUBJECT, "subject")           /* the subjects' prefix */                             \
	X(TLS_CA, "tls-ca")             /* servers' certificates checked against it */         \
	X(TLS_CERT, "tls-cert")         /* a client certificate, with tls-key */               \
	X(TLS_KEY, "tls-key")                                                                  \
	X(TLS_HOSTNAME, "tls-hostname") /* the name servers' certificates must carry */

#define PR_NATS_OPT_ID(id, key) NOPT_##id,
enum pr_nats_opt { PR_NATS_OPTS(PR_NATS_OPT_ID) PR_NATS_NOPTS };
#undef PR_NATS_OPT_ID

/* The keys, in the table's order, NULL-terminated. */
#define PR_NATS_OPT_KEY(id, key) key,
#define PR_NATS_OPT_KEYS { PR_NATS_OPTS(PR_NATS_OPT_KEY) NULL }

#define PR_NATS_URL_DEFAULT "nats://127.0.0.1:4222"
#define PR_NATS_SUBJECT_PREFIX "procreg"  /* subjects: PREFIX.SCOPE.*, SCOPE the registry's */
#define PR_NATS_TLS_CA_DEFAULT "/etc/ssl/certs/ca-certificates.crt"  /* the system's CAs */

#endif /* PROCREGD_NATS_OPTS_H */
