/*
 * hiredis_compat - what differs between the two hiredis generations the
 * agent builds against: 0.14 (Debian 12) and >= 1.1 (Debian 13, Ubuntu
 * 24.04, Alpine, EPEL), and whether this build has TLS (hiredis_ssl).
 *
 * SPOA_TLS is set by `make WITH_TLS=1` (which requires hiredis >= 1.1 with
 * hiredis_ssl); without it, nothing here pulls in OpenSSL.
 */
#ifndef SPOA_HIREDIS_COMPAT_H
#define SPOA_HIREDIS_COMPAT_H

#include <hiredis/hiredis.h>

#define SPOA_HIREDIS_AT_LEAST(maj, min) \
	(HIREDIS_MAJOR > (maj) || (HIREDIS_MAJOR == (maj) && HIREDIS_MINOR >= (min)))

/* hiredis 1.x: redisOptions, async connect and command timeouts. */
#if SPOA_HIREDIS_AT_LEAST(1, 1)
#define SPOA_HIREDIS_OPTIONS 1
#else
#define SPOA_HIREDIS_OPTIONS 0
#endif

#ifndef SPOA_TLS
#define SPOA_TLS 0
#endif

#if SPOA_TLS && !SPOA_HIREDIS_OPTIONS
#error "WITH_TLS=1 needs hiredis >= 1.1 with hiredis_ssl (tools/hiredis-build.sh)"
#endif

/* "yes" or "no": what --version prints after "tls:". */
#define SPOA_TLS_STR (SPOA_TLS ? "yes" : "no")

#endif /* SPOA_HIREDIS_COMPAT_H */
