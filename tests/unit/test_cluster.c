/*
 * test_cluster - Redis Cluster routing (CRC16 vectors from the Redis Cluster
 * spec, hash tags, the keys of a multi-window policy in one slot whatever
 * the account, slot map from CLUSTER SLOTS, MOVED/ASK parsing) and the
 * Redis URL parser with secrets from the environment. No sockets: replies
 * are canned RESP parsed into the struct cluster_view cluster.c reads
 * (resp.h): no hiredis.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster.h"
#include "redis_url.h"
#include "resp.h"
#include "window.h"

static unsigned slot_of(const char *key)
{
	return cluster_key_slot(key, strlen(key));
}

/* ------------------------------------------------------------------------ */
/* CRC16 and slots                                                            */
/* ------------------------------------------------------------------------ */

static void test_crc16_vectors(void **state)
{
	(void)state;
	/* The Redis Cluster spec, appendix A: "123456789" -> 0x31C3. */
	assert_int_equal(cluster_crc16("123456789", 9), 0x31C3);
	assert_int_equal(cluster_crc16("", 0), 0);
	/* Values CLUSTER KEYSLOT answers on Redis 7 (checked by t_cluster.py). */
	assert_int_equal(slot_of("123456789"), 12739);
	assert_int_equal(slot_of("foo"), 12182);
	assert_int_equal(slot_of("bar"), 5061);
	assert_int_equal(slot_of("hello"), 866);
	assert_int_equal(slot_of("user1000"), 3443);
	assert_int_equal(slot_of("transfer:limit:v1:ACC-1001"), 10189);
	/* Every slot is below 16384, even for bytes with the high bit set. */
	{
		unsigned char k[64];
		unsigned i;

		for (i = 0; i < sizeof(k); i++)
			k[i] = (unsigned char)(0xff - i * 3);
		for (i = 0; i <= sizeof(k); i++)
			assert_true(cluster_key_slot((const char *)k, i) < CLUSTER_SLOTS);
	}
}

static void test_hash_tags(void **state)
{
	(void)state;
	/* The spec's examples. */
	assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
	assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
	assert_int_equal(slot_of("foo{}{bar}"),
	                 cluster_crc16("foo{}{bar}", 10) & (CLUSTER_SLOTS - 1));
	assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
	assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
	/* No closing brace, or a lone one: the whole key. */
	assert_int_equal(slot_of("foo{bar"), cluster_crc16("foo{bar", 7) & (CLUSTER_SLOTS - 1));
	assert_int_equal(slot_of("foo}bar{"), cluster_crc16("foo}bar{", 8) & (CLUSTER_SLOTS - 1));
	assert_int_equal(slot_of("{"), cluster_crc16("{", 1) & (CLUSTER_SLOTS - 1));
	assert_int_equal(slot_of("{}"), cluster_crc16("{}", 2) & (CLUSTER_SLOTS - 1));
	/* A multi-window policy: all of an account's windows in one slot. */
	assert_int_equal(slot_of("api:limit:v1:{ACC-1001}:1s"), slot_of("ACC-1001"));
	assert_int_equal(slot_of("api:limit:v1:{ACC-1001}:1h"), slot_of("ACC-1001"));
	/* The tag is length-delimited: bytes after a NUL still count. */
	assert_int_equal(cluster_key_slot("a{b\0c}d", 7), cluster_crc16("b\0c", 3) & (CLUSTER_SLOTS - 1));
}

/* The keys window_build_args() makes for one decision of a 4-window policy
 * share one slot, the CRC of the (escaped) account, even for accounts with
 * '{', '}' or '%' (issue 10 item 19: "}x" used to give an empty tag). */
static void test_window_keys_one_slot(void **state)
{
	static const char *const accounts[] = {
		"}x", "{a}b", "}", "{", "{}", "}{", "a}b}c", "%7D", "%", "x{y}z", "ACC-1001",
	};
	static const uint64_t ms[WINDOW_MAX_WINDOWS] = { 1000, 60000, 3600000, 500 };
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	size_t i;
	unsigned k;

	(void)state;
	memset(&p, 0, sizeof(p));
	memcpy(p.name, "api", 3);
	p.name_len = 3;
	p.nwin = WINDOW_MAX_WINDOWS;
	for (k = 0; k < WINDOW_MAX_WINDOWS; k++) {
		p.win[k].limit = 10;
		p.win[k].window_ms = ms[k];
	}
	for (i = 0; i < sizeof(accounts) / sizeof(accounts[0]); i++) {
		const char *acc = accounts[i];
		unsigned slot;

		assert_int_equal(window_build_args(&p, "sha", acc, strlen(acc), 1, &a, &why), 0);
		assert_int_equal(a.nkeys, WINDOW_MAX_WINDOWS);
		slot = cluster_key_slot(a.argv[3], a.argvlen[3]);
		for (k = 1; k < a.nkeys; k++)
			assert_int_equal(cluster_key_slot(a.argv[3 + k], a.argvlen[3 + k]), slot);
		/* the tag is the account itself when it has no '}' or '%' */
		if (!strpbrk(acc, "}%"))
			assert_int_equal(slot, slot_of(acc));
	}
	/* the escaped form is what is hashed */
	assert_int_equal(window_build_args(&p, "sha", "}x", 2, 1, &a, &why), 0);
	assert_int_equal(cluster_key_slot(a.argv[3], a.argvlen[3]), slot_of("%7Dx"));
}

/* ------------------------------------------------------------------------ */
/* Slot map                                                                   */
/* ------------------------------------------------------------------------ */

/* A 3-primary cluster as Redis 7.0 answers CLUSTER SLOTS: each node entry is
 * [ip, port, id, {metadata}], replicas after the primary. */
static const char slots_3[] =
	"*3\r\n"
	"*4\r\n:0\r\n:5460\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$4\r\naaaa\r\n*0\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7004\r\n$4\r\nbbbb\r\n*0\r\n"
	"*4\r\n:5461\r\n:10922\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7001\r\n$4\r\ncccc\r\n*0\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7005\r\n$4\r\ndddd\r\n*0\r\n"
	"*4\r\n:10923\r\n:16383\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7002\r\n$4\r\neeee\r\n*0\r\n"
	"*4\r\n$9\r\n127.0.0.1\r\n:7003\r\n$4\r\nffff\r\n*0\r\n";

static void test_map_from_slots(void **state)
{
	static struct cluster_map m;
	const struct cluster_addr *a;
	char err[128];
	const struct cluster_view *r = resp_parse(slots_3);

	(void)state;
	assert_int_equal(cluster_map_from_slots(&m, r, "127.0.0.1", err, sizeof(err)), 0);
	assert_int_equal(m.nnodes, 3);
	assert_int_equal(m.covered, CLUSTER_SLOTS);
	a = cluster_map_node_for(&m, 0);
	assert_string_equal(a->host, "127.0.0.1");
	assert_int_equal(a->port, 7000);
	assert_int_equal(cluster_map_node_for(&m, 5460)->port, 7000);
	assert_int_equal(cluster_map_node_for(&m, 5461)->port, 7001);
	assert_int_equal(cluster_map_node_for(&m, 10922)->port, 7001);
	assert_int_equal(cluster_map_node_for(&m, 10923)->port, 7002);
	assert_int_equal(cluster_map_node_for(&m, 16383)->port, 7002);
	assert_null(cluster_map_node_for(&m, 16384));
	/* replicas never enter the map */
	assert_int_equal(cluster_map_find(&m, "127.0.0.1", 7004), -1);
}

static void test_map_old_shapes(void **state)
{
	static struct cluster_map m;
	char err[128];
	/* Redis < 7: [ip, port] or [ip, port, id], no replicas; split ranges
	 * of one node; a nil host (unknown endpoint: the host we asked). */
	const struct cluster_view *r = resp_parse(
		"*3\r\n"
		"*3\r\n:0\r\n:99\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
		"*3\r\n:100\r\n:199\r\n*3\r\n$-1\r\n:7001\r\n$2\r\nid\r\n"
		"*3\r\n:200\r\n:200\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n");

	(void)state;
	assert_int_equal(cluster_map_from_slots(&m, r, "10.1.2.3", err, sizeof(err)), 0);
	assert_int_equal(m.nnodes, 2);
	assert_int_equal(m.covered, 201);
	assert_int_equal(cluster_map_node_for(&m, 200)->port, 7000);
	assert_string_equal(cluster_map_node_for(&m, 150)->host, "10.1.2.3");
	assert_null(cluster_map_node_for(&m, 201));

	/* "?" is an unknown endpoint: its ranges stay unserved. */
	r = resp_parse("*2\r\n"
	               "*3\r\n:0\r\n:9\r\n*2\r\n$1\r\n?\r\n:7000\r\n"
	               "*3\r\n:10\r\n:19\r\n*2\r\n$0\r\n\r\n:7001\r\n");
	assert_int_equal(cluster_map_from_slots(&m, r, "::1", err, sizeof(err)), 0);
	assert_int_equal(m.covered, 10);
	assert_null(cluster_map_node_for(&m, 0));
	assert_string_equal(cluster_map_node_for(&m, 10)->host, "::1");
}

static void test_map_bad_replies(void **state)
{
	static struct cluster_map m;
	static const char *const bad[] = {
		"-ERR This instance has cluster support disabled\r\n",
		"*0\r\n",                                                   /* nothing served */
		":1\r\n",
		"*1\r\n:1\r\n",
		"*1\r\n*2\r\n:0\r\n:1\r\n",                                 /* no node */
		"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",          /* start > end */
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",      /* slot 16384 */
		"*1\r\n*3\r\n:-1\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",
		"*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$1\r\nh\r\n:0\r\n",          /* port 0 */
		"*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$1\r\nh\r\n:65536\r\n",
		"*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n:1\r\n:1\r\n",               /* host not a string */
		"*1\r\n*3\r\n:0\r\n:4\r\n*1\r\n$1\r\nh\r\n",                /* node without port */
		"*1\r\n*3\r\n:0\r\n:4\r\n$1\r\nh\r\n",                      /* node not an array */
		"*1\r\n*3\r\n$1\r\n0\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",     /* start not an int */
	};
	char err[128];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const struct cluster_view *r = resp_parse(bad[i]);

		err[0] = '\0';
		assert_int_equal(cluster_map_from_slots(&m, r, "h", err, sizeof(err)), -1);
		assert_true(strncmp(err, "CLUSTER SLOTS", 13) == 0);
		assert_int_equal(m.nnodes, 0);
		assert_int_equal(m.covered, 0);
	}
	/* A nil host with no host to fall back on is refused. */
	{
		const struct cluster_view *r = resp_parse("*1\r\n*3\r\n:0\r\n:4\r\n*2\r\n$-1\r\n:1\r\n");

		assert_int_equal(cluster_map_from_slots(&m, r, NULL, err, sizeof(err)), -1);
	}
	assert_int_equal(cluster_map_from_slots(&m, NULL, "h", err, sizeof(err)), -1);
}

static void test_map_edit(void **state)
{
	static struct cluster_map a, b;
	char host[32];
	char err[128];
	const struct cluster_view *r = resp_parse(slots_3);
	int idx;
	unsigned i;

	(void)state;
	assert_int_equal(cluster_map_from_slots(&a, r, "127.0.0.1", err, sizeof(err)), 0);
	assert_int_equal(cluster_map_from_slots(&b, r, "127.0.0.1", err, sizeof(err)), 0);
	assert_true(cluster_map_equal(&a, &b));

	/* MOVED 100 to a known node, then to a new one */
	idx = cluster_map_add(&b, "127.0.0.1", 7001);
	assert_int_equal(idx, 1);
	assert_int_equal(cluster_map_set_slot(&b, 100, (unsigned)idx), 0);
	assert_int_equal(cluster_map_node_for(&b, 100)->port, 7001);
	assert_int_equal(b.covered, CLUSTER_SLOTS);
	assert_false(cluster_map_equal(&a, &b));
	idx = cluster_map_add(&b, "127.0.0.1", 7009);
	assert_int_equal(idx, 3);
	assert_int_equal(cluster_map_set_slot(&b, 100, (unsigned)idx), 0);
	assert_int_equal(cluster_map_node_for(&b, 100)->port, 7009);
	assert_int_equal(cluster_map_set_slot(&b, CLUSTER_SLOTS, 0), -1);
	assert_int_equal(cluster_map_set_slot(&b, 0, 4), -1);

	/* An empty map learns a slot; bad nodes are refused; the map fills up. */
	cluster_map_init(&a);
	assert_int_equal(cluster_map_add(&a, "", 1), -1);
	assert_int_equal(cluster_map_add(&a, "h", 0), -1);
	assert_int_equal(cluster_map_add(&a, "h", 65536), -1);
	assert_int_equal(cluster_map_add(&a, "h", 1), 0);
	assert_int_equal(cluster_map_set_slot(&a, 7, 0), 0);
	assert_int_equal(a.covered, 1);
	for (i = 1; i < CLUSTER_NODES_MAX; i++) {
		snprintf(host, sizeof(host), "10.0.0.%u", i);
		assert_int_equal(cluster_map_add(&a, host, 1), (int)i);
	}
	assert_int_equal(cluster_map_add(&a, "10.9.9.9", 1), -1);
	assert_int_equal(cluster_map_add(&a, "h", 1), 0);
}

/* ------------------------------------------------------------------------ */
/* Error replies                                                              */
/* ------------------------------------------------------------------------ */

static enum cluster_reply_kind kind_of(const char *s)
{
	return cluster_classify_error(s, strlen(s));
}

static void test_classify(void **state)
{
	(void)state;
	assert_int_equal(kind_of("MOVED 3999 127.0.0.1:6381"), CLUSTER_REPLY_MOVED);
	assert_int_equal(kind_of("ASK 3999 127.0.0.1:6381"), CLUSTER_REPLY_ASK);
	assert_int_equal(kind_of("TRYAGAIN Multiple keys request during rehashing of slot"),
	                 CLUSTER_REPLY_TRYAGAIN);
	assert_int_equal(kind_of("CLUSTERDOWN The cluster is down"), CLUSTER_REPLY_CLUSTERDOWN);
	assert_int_equal(kind_of("CLUSTERDOWN"), CLUSTER_REPLY_CLUSTERDOWN);
	assert_int_equal(kind_of("READONLY You can't write against a read only replica."),
	                 CLUSTER_REPLY_READONLY);
	assert_int_equal(kind_of("NOSCRIPT No matching script."), CLUSTER_REPLY_OTHER);
	assert_int_equal(kind_of("ASKING"), CLUSTER_REPLY_OTHER);
	assert_int_equal(kind_of("MOVEDX 1 h:1"), CLUSTER_REPLY_OTHER);
	assert_int_equal(kind_of("ERR unknown"), CLUSTER_REPLY_OTHER);
	assert_int_equal(kind_of(""), CLUSTER_REPLY_OTHER);
	assert_int_equal(cluster_classify_error(NULL, 0), CLUSTER_REPLY_OTHER);
	/* only the <len> bytes given count */
	assert_int_equal(cluster_classify_error("MOVED", 4), CLUSTER_REPLY_OTHER);
	assert_string_equal(cluster_reply_kind_str(CLUSTER_REPLY_ASK), "ask");
	assert_string_equal(cluster_reply_kind_str(CLUSTER_REPLY_COUNT), "unknown");
}

static int redirect(const char *s, const char *from, struct cluster_redirect *out)
{
	memset(out, 0x5a, sizeof(*out));
	return cluster_parse_redirect(s, strlen(s), from, out);
}

static void test_redirects(void **state)
{
	static const char *const bad[] = {
		"MOVED", "MOVED ", "MOVED 3999", "MOVED 3999 ", "MOVED 3999 127.0.0.1",
		"MOVED 16384 127.0.0.1:6381", "MOVED -1 127.0.0.1:6381", "MOVED x 127.0.0.1:6381",
		"MOVED 3999 127.0.0.1:0", "MOVED 3999 127.0.0.1:65536", "MOVED 3999 127.0.0.1:",
		"MOVED 3999 127.0.0.1:63x", "MOVED  3999 127.0.0.1:6381", "MOVED 3999 a b:1",
		"ASK 123456 h:1", "TRYAGAIN 1 h:1", "NOSCRIPT", "ERR MOVED 1 h:1",
	};
	struct cluster_redirect r;
	size_t i;

	(void)state;
	assert_int_equal(redirect("MOVED 3999 127.0.0.1:6381", NULL, &r), 0);
	assert_int_equal(r.kind, CLUSTER_REPLY_MOVED);
	assert_int_equal(r.slot, 3999);
	assert_string_equal(r.to.host, "127.0.0.1");
	assert_int_equal(r.to.port, 6381);

	assert_int_equal(redirect("ASK 0 10.0.0.7:7000", NULL, &r), 0);
	assert_int_equal(r.kind, CLUSTER_REPLY_ASK);
	assert_int_equal(r.slot, 0);
	assert_string_equal(r.to.host, "10.0.0.7");
	assert_int_equal(r.to.port, 7000);

	assert_int_equal(redirect("MOVED 16383 redis-3.example:6379", NULL, &r), 0);
	assert_int_equal(r.slot, 16383);
	assert_string_equal(r.to.host, "redis-3.example");

	/* IPv6: the port follows the last ':' (brackets tolerated) */
	assert_int_equal(redirect("MOVED 12 ::1:7002", NULL, &r), 0);
	assert_string_equal(r.to.host, "::1");
	assert_int_equal(r.to.port, 7002);
	assert_int_equal(redirect("ASK 12 [fe80::1]:7002", NULL, &r), 0);
	assert_string_equal(r.to.host, "fe80::1");

	/* unknown endpoint: same host as the one asked */
	assert_int_equal(redirect("MOVED 5 :7003", "127.0.0.2", &r), 0);
	assert_string_equal(r.to.host, "127.0.0.2");
	assert_int_equal(r.to.port, 7003);
	assert_int_equal(redirect("MOVED 5 :7003", NULL, &r), -1);
	assert_int_equal(redirect("MOVED 5 :7003", "", &r), -1);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(redirect(bad[i], "h", &r), -1);
	/* only the <len> bytes given count */
	assert_int_equal(cluster_parse_redirect("MOVED 1 h:12345", 13, NULL, &r), 0);
	assert_int_equal(r.to.port, 123);
}

/* ------------------------------------------------------------------------ */
/* Redis URLs                                                                 */
/* ------------------------------------------------------------------------ */

static void clear_env(void)
{
	unsetenv("RATELIMIT_SPOA_REDIS_USER");
	unsetenv("RATELIMIT_SPOA_REDIS_PASSWORD");
	unsetenv("RATELIMIT_SPOA_REDIS_PASSWORD_FILE");
	unsetenv("RATELIMIT_SPOA_SENTINEL_PASSWORD");
	unsetenv("RATELIMIT_SPOA_SENTINEL_PASSWORD_FILE");
}

static void test_url_shapes(void **state)
{
	static struct redis_url u;
	char err[256];

	(void)state;
	assert_int_equal(redis_url_parse("redis://127.0.0.1:6379/0", &u, err, sizeof(err)), 0);
	assert_int_equal(u.mode, REDIS_URL_TCP);
	assert_int_equal(u.nhosts, 1);
	assert_string_equal(u.hosts[0].host, "127.0.0.1");
	assert_int_equal(u.hosts[0].port, 6379);
	assert_int_equal(u.db, 0);
	assert_false(u.has_pass);
	assert_string_equal(u.addr, "127.0.0.1:6379/0");

	assert_int_equal(redis_url_parse("redis://localhost", &u, err, sizeof(err)), 0);
	assert_int_equal(u.hosts[0].port, 6379);
	assert_int_equal(u.db, -1);

	assert_int_equal(redis_url_parse("redis://[::1]:7000/3", &u, err, sizeof(err)), 0);
	assert_string_equal(u.hosts[0].host, "::1");
	assert_int_equal(u.hosts[0].port, 7000);
	assert_int_equal(u.db, 3);
	assert_string_equal(u.addr, "[::1]:7000/3");

	/* ACL user, a password with '@', '/' and an escape; never in addr */
	assert_int_equal(redis_url_parse("redis://app:p%40ss/w@rd@127.0.0.1:6380/2", &u,
	                                 err, sizeof(err)), 0);
	assert_string_equal(u.user, "app");
	assert_string_equal(u.pass, "p@ss/w@rd");
	assert_true(u.has_pass);
	assert_int_equal(u.hosts[0].port, 6380);
	assert_null(strstr(u.addr, "rd"));
	redis_url_wipe(&u);
	assert_string_equal(u.pass, "");
	assert_false(u.has_pass);

	/* password only */
	assert_int_equal(redis_url_parse("redis://:secret@127.0.0.1:6379", &u, err, sizeof(err)), 0);
	assert_string_equal(u.user, "");
	assert_string_equal(u.pass, "secret");

	assert_int_equal(redis_url_parse("unix:///run/redis.sock", &u, err, sizeof(err)), 0);
	assert_int_equal(u.mode, REDIS_URL_UNIX);
	assert_string_equal(u.hosts[0].host, "/run/redis.sock");
	assert_string_equal(u.addr, "unix:/run/redis.sock");

	assert_int_equal(redis_url_parse("cluster://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002",
	                                 &u, err, sizeof(err)), 0);
	assert_int_equal(u.mode, REDIS_URL_CLUSTER);
	assert_int_equal(u.nhosts, 3);
	assert_int_equal(u.hosts[1].port, 7001);
	assert_string_equal(u.hosts[2].host, "::1");
	assert_string_equal(u.addr, "cluster://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002");

	assert_int_equal(redis_url_parse("sentinel://127.0.0.1:26379,127.0.0.1/mymaster",
	                                 &u, err, sizeof(err)), 0);
	assert_int_equal(u.mode, REDIS_URL_SENTINEL);
	assert_int_equal(u.nhosts, 2);
	assert_int_equal(u.hosts[1].port, 26379);
	assert_string_equal(u.master, "mymaster");
	assert_string_equal(u.addr, "sentinel://127.0.0.1:26379,127.0.0.1:26379/mymaster");
	assert_string_equal(redis_url_mode_str(u.mode), "sentinel");
	assert_string_equal(redis_url_mode_str(REDIS_URL_MODE_COUNT), "unknown");
}

static void test_url_errors(void **state)
{
	static const char *const bad[] = {
		"", "http://h:1", "redis://", "redis://h:0", "redis://h:65536", "redis://h:x",
		"redis://h/x", "redis://h/70000", "redis://[::1", "redis://h1:1,h2:2",
		"redis://user@h:1", "redis://user:@h:1", "redis://u:p%zz@h:1", "redis://u:p%4@h:1",
		"unix://relative", "unix://", "cluster://", "cluster://h:1,", "cluster://h:1,,h:2",
		"cluster://h:1/1", "sentinel://h:1", "sentinel://h:1/", "sentinel:///m",
		"sentinel://h:1/a/b",
		"cluster://1:1,2:2,3:3,4:4,5:5,6:6,7:7,8:8,9:9,10:10,11:11,12:12,13:13,14:14,15:15,16:16,17:17",
	};
	static struct redis_url u;
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(redis_url_parse(bad[i], &u, err, sizeof(err)), -1);
		assert_true(err[0] != '\0');
	}
	assert_int_equal(redis_url_parse(NULL, &u, err, sizeof(err)), -1);
	/* the error never repeats a password */
	assert_int_equal(redis_url_parse("redis://u:hunter2@h:99999", &u, err, sizeof(err)), -1);
	assert_null(strstr(err, "hunter2"));
	assert_string_equal(u.pass, "");
}

static void test_url_secrets(void **state)
{
	static struct redis_url u;
	char err[256], path[] = "/tmp/test_cluster_secret.XXXXXX";
	int fd;

	(void)state;
	clear_env();
	assert_int_equal(redis_url_parse("redis://127.0.0.1:6379", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_false(u.has_pass);

	/* the variable */
	setenv("RATELIMIT_SPOA_REDIS_PASSWORD", "from-env", 1);
	setenv("RATELIMIT_SPOA_REDIS_USER", "limiter", 1);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_true(u.has_pass);
	assert_string_equal(u.pass, "from-env");
	assert_string_equal(u.user, "limiter");

	/* the URL wins over the environment */
	assert_int_equal(redis_url_parse("redis://app:in-url@127.0.0.1:6379", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_string_equal(u.pass, "in-url");
	assert_string_equal(u.user, "app");

	/* the file: first line, newline dropped; the variable wins over it */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "from-file\r\nignored\n", 19), 19);
	close(fd);
	setenv("RATELIMIT_SPOA_REDIS_PASSWORD_FILE", path, 1);
	assert_int_equal(redis_url_parse("cluster://127.0.0.1:7000", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_string_equal(u.pass, "from-env");
	unsetenv("RATELIMIT_SPOA_REDIS_PASSWORD");
	assert_int_equal(redis_url_parse("cluster://127.0.0.1:7000", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_string_equal(u.pass, "from-file");
	assert_false(u.has_sentinel_pass);

	/* sentinels have their own */
	setenv("RATELIMIT_SPOA_SENTINEL_PASSWORD_FILE", path, 1);
	assert_int_equal(redis_url_parse("sentinel://127.0.0.1/m", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), 0);
	assert_true(u.has_sentinel_pass);
	assert_string_equal(u.sentinel_pass, "from-file");

	/* an empty file, a missing file: errors naming the variable, not a secret */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "\n", 1), 1);
	close(fd);
	assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "RATELIMIT_SPOA_REDIS_PASSWORD_FILE"));
	unlink(path);
	assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cannot open"));

	/* a user without any password is refused */
	clear_env();
	setenv("RATELIMIT_SPOA_REDIS_USER", "limiter", 1);
	assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, err, sizeof(err)), 0);
	assert_int_equal(redis_url_load_secrets(&u, err, sizeof(err)), -1);
	clear_env();
}

static void test_url_same(void **state)
{
	static struct redis_url a, b;
	char err[256];

	(void)state;
	assert_int_equal(redis_url_parse("cluster://h:1,h:2", &a, err, sizeof(err)), 0);
	assert_int_equal(redis_url_parse("cluster://h:1,h:2", &b, err, sizeof(err)), 0);
	assert_true(redis_url_same(&a, &b));
	assert_int_equal(redis_url_parse("cluster://h:1,h:3", &b, err, sizeof(err)), 0);
	assert_false(redis_url_same(&a, &b));
	assert_int_equal(redis_url_parse("redis://h:1", &a, err, sizeof(err)), 0);
	assert_int_equal(redis_url_parse("redis://:x@h:1", &b, err, sizeof(err)), 0);
	assert_false(redis_url_same(&a, &b));
	assert_int_equal(redis_url_parse("sentinel://h:1/a", &a, err, sizeof(err)), 0);
	assert_int_equal(redis_url_parse("sentinel://h:1/b", &b, err, sizeof(err)), 0);
	assert_false(redis_url_same(&a, &b));
	/* host:port formatting for logs */
	redis_url_format_host("::1", 7000, err, sizeof(err));
	assert_string_equal(err, "[::1]:7000");
	redis_url_format_host("10.0.0.1", 7000, err, sizeof(err));
	assert_string_equal(err, "10.0.0.1:7000");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_vectors),
		cmocka_unit_test(test_hash_tags),
		cmocka_unit_test(test_window_keys_one_slot),
		cmocka_unit_test(test_map_from_slots),
		cmocka_unit_test(test_map_old_shapes),
		cmocka_unit_test(test_map_bad_replies),
		cmocka_unit_test(test_map_edit),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_redirects),
		cmocka_unit_test(test_url_shapes),
		cmocka_unit_test(test_url_errors),
		cmocka_unit_test(test_url_secrets),
		cmocka_unit_test(test_url_same),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
