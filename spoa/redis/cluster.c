/*
 * cluster - Redis Cluster routing without I/O (see cluster.h).
 *
 * Everything here reads the caller's bytes and replies and writes only the
 * caller's structs.
 */
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "decimal.h"

static const char *const reply_kind_names[CLUSTER_REPLY_COUNT] = {
	[CLUSTER_REPLY_OTHER]       = "other",
	[CLUSTER_REPLY_MOVED]       = "moved",
	[CLUSTER_REPLY_ASK]         = "ask",
	[CLUSTER_REPLY_TRYAGAIN]    = "tryagain",
	[CLUSTER_REPLY_CLUSTERDOWN] = "clusterdown",
	[CLUSTER_REPLY_READONLY]    = "readonly",
};

/* Name of <k> for logs; "unknown" outside the enum. Static storage. */
const char *cluster_reply_kind_str(enum cluster_reply_kind k)
{
	if ((unsigned)k >= CLUSTER_REPLY_COUNT)
		return "unknown";
	return reply_kind_names[k];
}

/* ------------------------------------------------------------------------ */
/* Hash slots                                                                 */
/* ------------------------------------------------------------------------ */

/* CRC16-XMODEM of <len> bytes at <buf>, four bits at a time: a 16-entry
 * table keeps it small and still does one lookup per nibble. */
uint16_t cluster_crc16(const void *buf, size_t len)
{
	/* t[i] = the CRC register after shifting nibble i through poly 0x1021 */
	static const uint16_t t[16] = {
		0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
		0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
	};
	const unsigned char *p = buf;
	unsigned crc = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		crc = ((crc << 4) & 0xffffu) ^ t[((crc >> 12) ^ (p[i] >> 4)) & 0x0fu];
		crc = ((crc << 4) & 0xffffu) ^ t[((crc >> 12) ^ (p[i] & 0x0fu)) & 0x0fu];
	}
	return (uint16_t)crc;
}

/* Slot of <key>/<len>. The spec's rule: if the key holds a '{' and a '}'
 * after it with at least one byte between, only those bytes are hashed
 * ("{user1000}.following"); "foo{}{bar}" hashes the whole key. */
unsigned cluster_key_slot(const char *key, size_t len)
{
	const char *open = len ? memchr(key, '{', len) : NULL;

	if (open) {
		size_t rest = len - (size_t)(open - key) - 1;
		const char *close = rest ? memchr(open + 1, '}', rest) : NULL;

		if (close && close > open + 1)
			return cluster_crc16(open + 1, (size_t)(close - open - 1)) & (CLUSTER_SLOTS - 1);
	}
	return cluster_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

/* ------------------------------------------------------------------------ */
/* The slot map                                                               */
/* ------------------------------------------------------------------------ */

/* Empty <m>: no node, every slot unserved. */
void cluster_map_init(struct cluster_map *m)
{
	m->nnodes = 0;
	m->covered = 0;
	memset(m->slot_node, CLUSTER_NO_NODE, sizeof(m->slot_node));
}

/* Index of <host>:<port> among <m>'s nodes, or -1. */
int cluster_map_find(const struct cluster_map *m, const char *host, int port)
{
	unsigned i;

	for (i = 0; i < m->nnodes; i++)
		if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
			return (int)i;
	return -1;
}

/* Index of <host>:<port> in <m>, a copy appended when new; -1 when refused. */
int cluster_map_add(struct cluster_map *m, const char *host, int port)
{
	size_t len = strlen(host);
	int idx = cluster_map_find(m, host, port);

	if (idx >= 0)
		return idx;
	if (len == 0 || len >= CLUSTER_HOST_MAX || port < 1 || port > 65535 ||
	    m->nnodes >= CLUSTER_NODES_MAX)
		return -1;
	memcpy(m->nodes[m->nnodes].host, host, len + 1);
	m->nodes[m->nnodes].port = port;
	return (int)m->nnodes++;
}

/* Route <slot> of <m> to node <idx>, counting newly served slots. */
int cluster_map_set_slot(struct cluster_map *m, unsigned slot, unsigned idx)
{
	if (slot >= CLUSTER_SLOTS || idx >= m->nnodes)
		return -1;
	if (m->slot_node[slot] == CLUSTER_NO_NODE)
		m->covered++;
	m->slot_node[slot] = (uint8_t)idx;
	return 0;
}

/* Node of <slot> in <m>, borrowed from <m>, or NULL. */
const struct cluster_addr *cluster_map_node_for(const struct cluster_map *m, unsigned slot)
{
	unsigned idx;

	if (slot >= CLUSTER_SLOTS)
		return NULL;
	idx = m->slot_node[slot];
	if (idx == CLUSTER_NO_NODE || idx >= m->nnodes)
		return NULL;
	return &m->nodes[idx];
}

/* Is <r> an integer reply in <lo>..<hi>? */
static bool reply_int_in(const struct cluster_view *r, long long lo, long long hi)
{
	return r && r->type == CLUSTER_VIEW_INTEGER && r->integer >= lo && r->integer <= hi;
}

/*
 * The host of node entry <n> ([host, port, id, ...]) into <dst>: a nil or
 * empty host is <from_host>. Returns 0, 1 for the unknown endpoint "?",
 * or -1 on a bad shape.
 */
static int slots_node_host(const struct cluster_view *n, const char *from_host, char *dst,
                           size_t cap)
{
	const struct cluster_view *h;
	const char *s;
	size_t len;

	if (!n || n->type != CLUSTER_VIEW_ARRAY || n->elements < 2 || !n->element)
		return -1;
	h = &n->element[0];
	if (h->type == CLUSTER_VIEW_NIL || (h->type == CLUSTER_VIEW_STRING && h->len == 0)) {
		s = from_host ? from_host : "";
		len = strlen(s);
	} else if (h->type == CLUSTER_VIEW_STRING && h->str) {
		s = h->str;
		len = h->len;
	} else {
		return -1;
	}
	if (len == 1 && s[0] == '?')
		return 1;
	if (len == 0 || len >= cap || memchr(s, '\0', len))
		return -1;
	memcpy(dst, s, len);
	dst[len] = '\0';
	return 0;
}

/* <m> from CLUSTER SLOTS reply <r> (borrowed) asked of <from_host>; see
 * cluster.h. Everything is checked before it is read. */
int cluster_map_from_slots(struct cluster_map *m, const struct cluster_view *r,
                           const char *from_host, char *err, size_t errlen)
{
	char host[CLUSTER_HOST_MAX];
	size_t i;

	cluster_map_init(m);
	if (!r || r->type != CLUSTER_VIEW_ARRAY || (r->elements && !r->element)) {
		if (r && r->type == CLUSTER_VIEW_ERROR && r->str)
			snprintf(err, errlen, "CLUSTER SLOTS: %.*s", (int)r->len, r->str);
		else
			snprintf(err, errlen, "CLUSTER SLOTS: not an array");
		return -1;
	}
	for (i = 0; i < r->elements; i++) {
		const struct cluster_view *e = &r->element[i], *node;
		unsigned s, lo, hi;
		int rc, idx;

		/* [start, end, primary, replica...] */
		node = e->type == CLUSTER_VIEW_ARRAY && e->elements >= 3 && e->element ?
		       &e->element[2] : NULL;
		if (!node || !reply_int_in(&e->element[0], 0, CLUSTER_SLOTS - 1) ||
		    !reply_int_in(&e->element[1], e->element[0].integer, CLUSTER_SLOTS - 1) ||
		    node->type != CLUSTER_VIEW_ARRAY || node->elements < 2 || !node->element ||
		    !reply_int_in(&node->element[1], 1, 65535)) {
			snprintf(err, errlen, "CLUSTER SLOTS: range %zu has the wrong shape", i);
			goto fail;
		}
		rc = slots_node_host(node, from_host, host, sizeof(host));
		if (rc == 1)
			continue;
		if (rc == -1) {
			snprintf(err, errlen, "CLUSTER SLOTS: range %zu has a bad host", i);
			goto fail;
		}
		idx = cluster_map_add(m, host, (int)node->element[1].integer);
		if (idx < 0) {
			snprintf(err, errlen, "CLUSTER SLOTS: more than %u primaries", CLUSTER_NODES_MAX);
			goto fail;
		}
		lo = (unsigned)e->element[0].integer;
		hi = (unsigned)e->element[1].integer;
		for (s = lo; s <= hi; s++)
			cluster_map_set_slot(m, s, (unsigned)idx);
	}
	if (m->covered == 0) {
		snprintf(err, errlen, "CLUSTER SLOTS: no slot is served");
		goto fail;
	}
	return 0;

fail:
	cluster_map_init(m);
	return -1;
}

/* Do <a> and <b> name the same nodes, in order, and route alike? */
bool cluster_map_equal(const struct cluster_map *a, const struct cluster_map *b)
{
	unsigned i;

	if (a->nnodes != b->nnodes || a->covered != b->covered)
		return false;
	for (i = 0; i < a->nnodes; i++)
		if (a->nodes[i].port != b->nodes[i].port ||
		    strcmp(a->nodes[i].host, b->nodes[i].host) != 0)
			return false;
	return memcmp(a->slot_node, b->slot_node, sizeof(a->slot_node)) == 0;
}

/* ------------------------------------------------------------------------ */
/* Error replies                                                              */
/* ------------------------------------------------------------------------ */

/* Does <s>/<len> start with the word <w> (followed by a blank or the end)? */
static bool starts_with_word(const char *s, size_t len, const char *w)
{
	size_t n = strlen(w);

	return len >= n && memcmp(s, w, n) == 0 && (len == n || s[n] == ' ');
}

/* Kind of the error text <s>/<len>; OTHER for anything not cluster's. */
enum cluster_reply_kind cluster_classify_error(const char *s, size_t len)
{
	if (!s)
		return CLUSTER_REPLY_OTHER;
	if (starts_with_word(s, len, "MOVED"))
		return CLUSTER_REPLY_MOVED;
	if (starts_with_word(s, len, "ASK"))
		return CLUSTER_REPLY_ASK;
	if (starts_with_word(s, len, "TRYAGAIN"))
		return CLUSTER_REPLY_TRYAGAIN;
	if (starts_with_word(s, len, "CLUSTERDOWN"))
		return CLUSTER_REPLY_CLUSTERDOWN;
	if (starts_with_word(s, len, "READONLY"))
		return CLUSTER_REPLY_READONLY;
	/* A script that hits a redirect inside redis.call() surfaces as
	 * "ERR Error running script ...: MOVED ..." only on old Redis; 7.x
	 * checks keys before running, so that shape is not handled here. */
	return CLUSTER_REPLY_OTHER;
}

/* MOVED/ASK text <s>/<len> into <out> (<from_host> stands in for an empty
 * host). Returns 0 or -1; see cluster.h. */
int cluster_parse_redirect(const char *s, size_t len, const char *from_host,
                           struct cluster_redirect *out)
{
	enum cluster_reply_kind k = cluster_classify_error(s, len);
	const char *p, *end = s + len, *sp, *colon, *host;
	size_t hlen;
	uint64_t slot, port;

	if (k != CLUSTER_REPLY_MOVED && k != CLUSTER_REPLY_ASK)
		return -1;
	p = s + (k == CLUSTER_REPLY_MOVED ? 6 : 4);
	if (p >= end)
		return -1;
	sp = memchr(p, ' ', (size_t)(end - p));
	if (!sp || decimal_parse(p, (size_t)(sp - p), CLUSTER_SLOTS - 1, &slot) != 0)
		return -1;
	p = sp + 1;
	colon = memrchr(p, ':', (size_t)(end - p));
	if (!colon || decimal_parse(colon + 1, (size_t)(end - colon - 1), 65535, &port) != 0 ||
	    port == 0)
		return -1;
	host = p;
	hlen = (size_t)(colon - p);
	if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
		host++;
		hlen -= 2;
	}
	if (hlen == 0) {
		if (!from_host || !*from_host)
			return -1;
		host = from_host;
		hlen = strlen(from_host);
	}
	if (hlen >= sizeof(out->to.host) || memchr(host, ' ', hlen) || memchr(host, '\0', hlen))
		return -1;
	out->kind = k;
	out->slot = slot;
	memcpy(out->to.host, host, hlen);
	out->to.host[hlen] = '\0';
	out->to.port = (int)port;
	return 0;
}
