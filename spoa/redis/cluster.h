/*
 * cluster - Redis Cluster routing without I/O.
 *
 * hiredis 0.14 knows nothing of Redis Cluster, so the agent routes itself:
 *   - the key's hash slot: CRC16 (XMODEM: poly 0x1021, init 0, no
 *     reflection, as the Redis Cluster spec) of the key, or of its hash tag
 *     (the bytes between the first '{' and the next '}', when not empty),
 *     modulo 16384;
 *   - the slot map: which primary serves each slot, built from a CLUSTER
 *     SLOTS reply (a struct cluster_view, no hiredis) and patched by MOVED
 *     redirects;
 *   - MOVED / ASK / TRYAGAIN / CLUSTERDOWN error replies, classified and
 *     parsed.
 * No sockets, no libev, no allocation: the limiter owns the connections.
 */
#ifndef SPOA_CLUSTER_H
#define SPOA_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SLOTS        16384u
#define CLUSTER_HOST_MAX     256          /* host or address, with its NUL */
#define CLUSTER_NODES_MAX    128u         /* primaries one map can name */
#define CLUSTER_NO_NODE      0xffu        /* slot_node[] of an unserved slot */

/* What an error reply from a cluster node asks of the client. */
enum cluster_reply_kind {
	CLUSTER_REPLY_OTHER = 0,    /* not an error, or not a cluster one */
	CLUSTER_REPLY_MOVED,        /* slot lives elsewhere now: update the map */
	CLUSTER_REPLY_ASK,          /* this once, ask that node (after ASKING) */
	CLUSTER_REPLY_TRYAGAIN,     /* keys of the slot are mid-migration */
	CLUSTER_REPLY_CLUSTERDOWN,  /* the cluster cannot serve the slot now */
	CLUSTER_REPLY_READONLY,     /* we talk to a replica (a demoted primary) */
	CLUSTER_REPLY_COUNT
};

struct cluster_addr {
	char host[CLUSTER_HOST_MAX];
	int port;
};

/* A parsed MOVED or ASK: "<slot> <host>:<port>". */
struct cluster_redirect {
	enum cluster_reply_kind kind;   /* MOVED or ASK */
	unsigned slot;
	struct cluster_addr to;
};

/* Slot -> primary. <slot_node>[s] indexes <nodes>, or is CLUSTER_NO_NODE. */
struct cluster_map {
	unsigned nnodes;
	unsigned covered;               /* slots that have a node */
	struct cluster_addr nodes[CLUSTER_NODES_MAX];
	uint8_t slot_node[CLUSTER_SLOTS];
};

const char *cluster_reply_kind_str(enum cluster_reply_kind k);

/* CRC16-XMODEM of <len> bytes at <buf> (the Redis Cluster checksum). */
uint16_t cluster_crc16(const void *buf, size_t len);

/* Hash slot of <key>/<len> (0..16383), honouring the {hash tag} rule. */
unsigned cluster_key_slot(const char *key, size_t len);

/* Empty <m>: no nodes, every slot unserved. */
void cluster_map_init(struct cluster_map *m);

/* Index of <host>:<port> in <m>, or -1. */
int cluster_map_find(const struct cluster_map *m, const char *host, int port);

/* Index of <host>:<port> in <m>, added if new. Returns -1 when the host is
 * empty or too long, the port out of range, or <m> is full. */
int cluster_map_add(struct cluster_map *m, const char *host, int port);

/* Route <slot> to node <idx> of <m> (a MOVED). Returns 0 or -1. */
int cluster_map_set_slot(struct cluster_map *m, unsigned slot, unsigned idx);

/* Node serving <slot>, borrowed from <m>, or NULL. */
const struct cluster_addr *cluster_map_node_for(const struct cluster_map *m, unsigned slot);

/* A reply as cluster.c reads it, without hiredis: the limiter converts
 * hiredis's redisReply (limiter_cluster.c), the unit tests parse RESP. */
enum cluster_view_type {
	CLUSTER_VIEW_OTHER = 0,            /* a status, or anything not read here */
	CLUSTER_VIEW_NIL,
	CLUSTER_VIEW_INTEGER,
	CLUSTER_VIEW_STRING,
	CLUSTER_VIEW_ERROR,
	CLUSTER_VIEW_ARRAY,
	CLUSTER_VIEW_COUNT
};

struct cluster_view {
	enum cluster_view_type type;
	long long integer;                  /* INTEGER */
	const char *str;                    /* STRING, ERROR: borrowed, not NUL-terminated */
	size_t len;
	size_t elements;                    /* ARRAY */
	const struct cluster_view *element; /* ARRAY: <elements> in a row */
};

/*
 * Build <m> from the reply <r> to CLUSTER SLOTS sent to <from_host> (a nil
 * or empty host in the reply means that same host; "?" an unknown endpoint,
 * whose ranges stay unserved). Only primaries enter the map: the agent
 * never reads state from replicas. Returns 0, or -1 with <err> when the
 * reply has the wrong shape or serves no slot at all (<m> is then empty).
 * <r> is borrowed.
 */
int cluster_map_from_slots(struct cluster_map *m, const struct cluster_view *r,
                           const char *from_host, char *err, size_t errlen);

/* Same nodes in the same order, same routes? */
bool cluster_map_equal(const struct cluster_map *a, const struct cluster_map *b);

/* What error text <s>/<len> (a reply's str, without the '-') asks for. */
enum cluster_reply_kind cluster_classify_error(const char *s, size_t len);

/*
 * Parse "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" in
 * <s>/<len> into <out>. An empty host (a node whose endpoint is unknown)
 * means <from_host>; the port follows the last ':' (an IPv6 host has no
 * brackets there). Returns 0, or -1 when <s> is not a well-formed redirect.
 */
int cluster_parse_redirect(const char *s, size_t len, const char *from_host,
                           struct cluster_redirect *out);

#endif /* SPOA_CLUSTER_H */
