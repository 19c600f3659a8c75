/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * output.h - how every procreg tool prints what other users chose: names,
 * group names, node names, metadata, process names. One writer for the
 * CLI, procreg-trace, procreg-bench and procregd's log, linked into each
 * as a small static library (never part of libprocreg.so).
 *
 * Any local user can register a name, and an administrator reads it on a
 * terminal or feeds it to a script. So:
 *
 * Text: the escaped form. Bytes pass through as they are except
 *
 *   \\            a backslash
 *   \n \t \r      line feed, tab, carriage return
 *   \xHH          any other C0 control byte (0x00-0x1f), DEL (0x7f), each
 *                 byte of a C1 control (U+0080-U+009F, "\xc2\x9b"), of a
 *                 Unicode line or paragraph separator (U+2028, U+2029)
 *                 or bidirectional formatting character (U+061C,
 *                 U+200E-U+200F, U+202A-U+202E, U+2066-U+2069), and each
 *                 byte that is not part of well-formed UTF-8 (a lone
 *                 0xff, a truncated sequence, an overlong, a surrogate)
 *
 * so that what a terminal shows is printable, one line, in the order it
 * was written, and the bytes can be had back exactly (procreg__unescape(),
 * the CLI's --escaped). Spaces and printable UTF-8 pass through.
 *
 * JSON: valid UTF-8, and lossless. A string field KEY holds the text with
 * each byte that is not part of well-formed UTF-8 replaced by U+FFFD
 * (written "\ufffd"); when there was such a byte, and only then, a field
 * KEY_base64 follows with the exact bytes (RFC 4648 base64, padded).
 * Without KEY_base64, the UTF-8 encoding of KEY's string is the bytes.
 * Controls, DEL, C1 controls, separators and bidirectional formatting
 * characters are written as \uXXXX (or \n, \t, ...) escapes, so that a
 * document dumped on a terminal is as safe as the text form.
 */
#ifndef PROCREG_OUTPUT_H
#define PROCREG_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "procreg.h"

/* Length of the well-formed UTF-8 sequence at P (N bytes left, N > 0);
 * 0 if P does not start one. Overlongs, surrogates and code points above
 * U+10FFFF are not well-formed. */
size_t procreg__utf8_len(const void *p, size_t n);
/* Whether all N bytes at P are well-formed UTF-8. */
bool procreg__utf8_valid(const void *p, size_t n);

/* ---- text ------------------------------------------------------------- */

/* S[0..N) in the escaped form, to F. */
void procreg__text(FILE *f, const void *s, size_t n);
/* The terminal columns the escaped form takes (a code point counts one). */
size_t procreg__text_width(const void *s, size_t n);
/* The escaped form, then spaces up to WIDTH columns (as "%-*s" would). */
void procreg__text_pad(FILE *f, const void *s, size_t n, int width);

/* What a buffer holds for a name in an error message: every valid name
 * whole, escaped, and the marker of a cut. */
#define PROCREG_TEXT_NAME_BUF (4 * PROCREG_NAME_MAX + 64)

/*
 * S[0..N) escaped into BUF (CAP bytes, NUL-terminated); returns BUF. Only
 * the first MAX bytes of S are shown (and fewer if their escaped form does
 * not fit): a cut is said, "...[10000 bytes, cut]", so that a name of any
 * length echoed in a message stays one line of bounded length.
 */
const char *procreg__text_cut(char *buf, size_t cap, const void *s, size_t n, size_t max);

/*
 * Decode the escaped form in place: S (NUL-terminated) becomes the bytes
 * it stands for, *LEN their number (they may hold NUL: S[*LEN] is NUL
 * too). \\, \n, \t, \r and \xHH (two hex digits, either case) are decoded;
 * any other backslash sequence is an error. 0, or -EINVAL with *BAD the
 * offset of the offending backslash in the original.
 */
int procreg__unescape(char *s, size_t *len, size_t *bad);

/* ---- JSON ------------------------------------------------------------- */

/* A JSON string for S[0..N): bytes not in well-formed UTF-8 become
 * U+FFFD. Lossy for those: a field that must be lossless is written with
 * procreg__json_field(). */
void procreg__json_str(FILE *f, const void *s, size_t n);
/* "KEY":STRING, and ,"KEY_base64":"..." when S is not well-formed UTF-8. */
void procreg__json_field(FILE *f, const char *key, const void *s, size_t n);
/* S[0..N) in base64 (RFC 4648, with padding), unquoted. */
void procreg__base64(FILE *f, const void *s, size_t n);

#endif /* PROCREG_OUTPUT_H */
