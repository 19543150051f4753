/*
 * test_contract - the agent's side of the decision contract: every reply
 * of tests/contract/decisions.txt (the file t_contract runs on the script
 * and the module) fed to window_decide_reply, which must give the case's
 * "agent" line; and the same reply under a shadow policy (a deny answered
 * as allow + shadow-deny, the numbers kept); and every deny answered again
 * from the deny cache (spoa/limiter/deny_cache.c) while its entry lives, which must
 * give what window_decide_reply gives for the reply the engines send for
 * the same case later (t_contract runs those: reset and retry_after less the
 * time passed, the rest unchanged).
 *
 * The file: $CONTRACT_FILE, else tests/contract/decisions.txt (run from the
 * repo root, as make test does). Only the reply and agent lines matter
 * here; tests/contract/contract.py describes the rest.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "deny_cache.h"
#include "rl_args.h"
#include "stored.h"
#include "window.h"

#define CONTRACT_LINE_MAX 4096

/* One reply line of a case and the agent line after it. */
struct contract_pair {
	char where[160];              /* "<case>: reply <n>" */
	struct window_reply reply;
	char err[256];                /* ERROR: the text (reply.str points here) */
	char status[16], reason[32];
	int64_t limit, remaining, reset, retry_after;
	unsigned window;
	bool sendable;                /* the agent sends such a request (one decision,
	                               * its cost within every limit: it refuses a
	                               * bigger one itself, see window_build_args) */
	uint64_t cost;                /* sendable: its cost */
	bool gcra;                    /* sendable: a GCRA bucket */
	bool pooled;                  /* its decision has a pool ("pool:...") */
	int lease_at;                 /* its leases' pair index ("lease:..."), or -1 */
	unsigned nwin;                /* its windows (a single decision's) */
	unsigned calmask;             /* bit i: window i is a quota ("cal:...") */
};

/* The index of the leases' pair ("lease:...") among the pairs of "args
 * ..." in <line> (a single decision's), or -1. */
static int contract_lease_at(const char *line)
{
	const char *p = strstr(line, " lease:");
	int spaces = 0;

	if (!p || strncmp(line + 5, "batch", 5) == 0)
		return -1;
	for (const char *q = line + 5; q < p; q++)
		spaces += *q == ' ';
	/* "<cost> <l0> <w0> ... <ln>" before it: 2 words per earlier pair */
	return (spaces - 1) / 2;
}

/* The windows of "args ..." in <line> (one decision) and which are
 * calendar quotas, as the agent's policy would have them (a quota's
 * denial is reason=quota). */
static void contract_args_cal(const char *line, unsigned *nwin, unsigned *calmask)
{
	char w[64];
	const char *p = line + 5;
	int used, i = 0;

	*nwin = 0;
	*calmask = 0;
	for (; sscanf(p, "%63s%n", w, &used) == 1; p += used, i++) {
		/* (a batch's quotas: the file's have one window per decision) */
		if (i == 0 && strcmp(w, "batch") == 0) {
			*nwin = 1;
			*calmask = strstr(line, " cal:") ? 1u : 0u;
			return;
		}
		if (i > 0 && i % 2 == 0 && (unsigned)(i / 2 - 1) < WINDOW_MAX_WINDOWS) {
			*nwin = (unsigned)(i / 2);
			if (strncmp(w, "cal:", 4) == 0)
				*calmask |= 1u << (i / 2 - 1);
		}
	}
}

/* Would the agent send the request of "args ..." in <line>? (cost, then
 * limit/window pairs, a GCRA window "gcra:<ms>:<burst>"; a batch's
 * decisions are not looked at.) Sets <*cost> and <*gcra>. */
static bool contract_args_sendable(const char *line, uint64_t *cost, bool *gcra, bool *pooled)
{
	long long c, limit, burst;
	char win[64];
	const char *p = line + 5;
	int used, nwin = 0;

	*gcra = false;
	*pooled = strstr(line, " pool:") != NULL;
	if (sscanf(p, "%lld%n", &c, &used) != 1 || c < 1)
		return false;
	*cost = (uint64_t)c;
	for (p += used; sscanf(p, "%lld %63s%n", &limit, win, &used) == 2; p += used, nwin++) {
		if (sscanf(win, "gcra:%*d:%lld", &burst) == 1) {
			*gcra = true;
			limit = burst;   /* a GCRA cost is bounded by the burst */
		}
		if (c > limit)
			return false;
	}
	return nwin > 0;
}

/* Parses "reply ..." in <line> (a copy, cut by strtok) into <pr>. 0 or -1. */
static int contract_parse_reply(char *line, struct contract_pair *pr)
{
	char *tok = strtok(line + 5, " \t\n");
	size_t i;

	memset(&pr->reply, 0, sizeof(pr->reply));
	if (!tok)
		return -1;
	if (strcmp(tok, "error") == 0) {
		char *rest = strtok(NULL, "\n");

		snprintf(pr->err, sizeof(pr->err), "%s", rest ? rest : "");
		pr->reply.kind = WINDOW_REPLY_ERROR;
		pr->reply.str = pr->err;
		pr->reply.len = strlen(pr->err);
		return 0;
	}
	pr->reply.kind = WINDOW_REPLY_INTEGERS;
	for (i = 0; tok && i < WINDOW_REPLY_INTS; i++, tok = strtok(NULL, " \t\n"))
		pr->reply.v[i] = strtoll(tok, NULL, 10);
	pr->reply.n = i;
	/* 6 integers, or 7 for a pooled decision */
	return (i == 6 || i == WINDOW_REPLY_INTS) && !tok ? 0 : -1;
}

/* Parses "agent ..." in <line> into <pr>. 0 or -1. */
static int contract_parse_agent(const char *line, struct contract_pair *pr)
{
	long long l, r, s, ra;

	if (sscanf(line, "agent %15s %lld %lld %lld %lld %u %31s", pr->status, &l, &r, &s, &ra,
	           &pr->window, pr->reason) != 7)
		return -1;
	pr->limit = l;
	pr->remaining = r;
	pr->reset = s;
	pr->retry_after = ra;
	if (strcmp(pr->reason, "-") == 0)
		pr->reason[0] = '\0';
	return 0;
}

/* Every reply/agent pair of <path> into a malloc'd array (the caller
 * frees it) of <*n>; fails the test on a malformed file. */
static struct contract_pair *contract_load(const char *path, size_t *n)
{
	FILE *f = fopen(path, "r");
	char line[CONTRACT_LINE_MAX], name[128] = "", copy[CONTRACT_LINE_MAX];
	struct contract_pair *all = NULL, *cur = NULL;
	size_t cap = 0, nreply = 0;
	int lineno = 0;
	bool sendable = false, gcra = false, pooled = false, release = false;
	unsigned nwin = 0, calmask = 0;
	uint64_t cost = 0;
	int lease_at = -1;

	if (!f)
		fail_msg("cannot open the contract %s (run from the repo root)", path);
	*n = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (strncmp(line, "case ", 5) == 0) {
			sscanf(line, "case %127s", name);
			nreply = 0;
			sendable = false;
		} else if (strncmp(line, "args ", 5) == 0) {
			sendable = contract_args_sendable(line, &cost, &gcra, &pooled);
			/* (a release or a settle is no decision: the agent reads
			 * its reply apart) */
			release = strncmp(line, "args release ", 13) == 0 ||
			          strncmp(line, "args settle ", 12) == 0;
			lease_at = contract_lease_at(line);
			/* (a batch's rows with leases decide the leases alone) */
			if (strstr(line, " lease:") && lease_at < 0)
				lease_at = 0;
			contract_args_cal(line, &nwin, &calmask);
		} else if (release) {
			continue;
		} else if (strncmp(line, "reply ", 6) == 0) {
			if (*n == cap) {
				cap = cap ? cap * 2 : 64;
				all = realloc(all, cap * sizeof(*all));
				assert_non_null(all);
			}
			cur = &all[(*n)++];
			memset(cur, 0, sizeof(*cur));
			snprintf(cur->where, sizeof(cur->where), "%s: reply %zu (line %d)", name,
			         ++nreply, lineno);
			snprintf(copy, sizeof(copy), "%s", line);
			if (contract_parse_reply(copy, cur) == -1)
				fail_msg("%s:%d: bad reply line", path, lineno);
			cur->status[0] = '\0';
			cur->sendable = sendable;
			cur->cost = cost;
			cur->gcra = gcra;
			cur->pooled = pooled;
			cur->lease_at = lease_at;
			cur->nwin = nwin;
			cur->calmask = calmask;
		} else if (strncmp(line, "agent ", 6) == 0) {
			if (!cur || cur->status[0] || contract_parse_agent(line, cur) == -1)
				fail_msg("%s:%d: an agent line belongs right after a reply", path, lineno);
		}
	}
	fclose(f);
	/* an error's text lives in its pair, which realloc may have moved */
	for (size_t i = 0; i < *n; i++)
		if (all[i].reply.kind == WINDOW_REPLY_ERROR)
			all[i].reply.str = all[i].err;
	return all;
}

static const char *contract_path(void)
{
	const char *p = getenv("CONTRACT_FILE");

	return p && *p ? p : "tests/contract/decisions.txt";
}

/* Each reply gives its agent line, under a plain and a shadow policy. */
static void test_contract_replies(void **state)
{
	struct window_policy plain, shadow;
	size_t n, i, nallow = 0, ndeny = 0, nerr = 0;
	struct contract_pair *all = contract_load(contract_path(), &n);

	(void)state;
	memset(&plain, 0, sizeof(plain));
	plain.nwin = 1;
	plain.win[0].limit = 1;
	plain.win[0].window_ms = 1000;
	shadow = plain;
	shadow.shadow = true;
	for (i = 0; i < n; i++) {
		const struct contract_pair *pr = &all[i];
		struct window_decision d, s;
		int rc;

		plain.pooled = shadow.pooled = pr->pooled;
		plain.inflight = shadow.inflight = pr->lease_at >= 0 ? 1 : 0;
		plain.lease_at = shadow.lease_at = pr->lease_at;
		/* a quota's windows as the call's limits have them */
		plain.nwin = pr->calmask ? pr->nwin : 1;
		for (unsigned k = 0; k < WINDOW_MAX_WINDOWS; k++)
			plain.win[k].cal = (pr->calmask >> k) & 1 ? WINDOW_CAL_MONTH : WINDOW_CAL_NONE;
		memcpy(shadow.win, plain.win, sizeof(plain.win));
		shadow.nwin = plain.nwin;
		rc = window_decide_reply(&plain, &pr->reply, &d);

		if (!pr->status[0])
			fail_msg("%s: no agent line", pr->where);
		if (strcmp(window_status_str(d.status), pr->status) != 0 ||
		    strcmp(window_reason_str(d.reason), pr->reason) != 0 ||
		    (d.status != WINDOW_ERROR &&
		     (d.limit != pr->limit || d.remaining != pr->remaining || d.reset != pr->reset ||
		      d.retry_after != pr->retry_after || d.window != pr->window)))
			fail_msg("%s: agent decided %s %lld %lld %lld %lld %u '%s', the contract says "
			         "%s %lld %lld %lld %lld %u '%s'",
			         pr->where, window_status_str(d.status), (long long)d.limit,
			         (long long)d.remaining, (long long)d.reset, (long long)d.retry_after,
			         d.window, window_reason_str(d.reason), pr->status, (long long)pr->limit,
			         (long long)pr->remaining, (long long)pr->reset,
			         (long long)pr->retry_after, pr->window, pr->reason);
		assert_int_equal(rc, d.status == WINDOW_ERROR ? -1 : 0);
		if (d.status == WINDOW_DENY)
			assert_int_equal(d.retry_after_us, pr->reply.v[4]);
		nallow += d.status == WINDOW_ALLOW;
		ndeny += d.status == WINDOW_DENY;
		nerr += d.status == WINDOW_ERROR;

		/* shadow: a deny is answered allow, the numbers stay */
		window_decide_reply(&shadow, &pr->reply, &s);
		if (d.status == WINDOW_DENY) {
			assert_int_equal(s.status, WINDOW_ALLOW);
			assert_int_equal(s.reason, WINDOW_REASON_SHADOW_DENY);
			assert_int_equal(s.retry_after, d.retry_after);
			assert_int_equal(s.remaining, d.remaining);
		} else {
			assert_int_equal(s.status, d.status);
			assert_int_equal(s.reason, d.reason);
		}
	}
	printf("# contract: %zu replies (%zu allow, %zu deny, %zu error)\n", n, nallow, ndeny,
	       nerr);
	/* (the file must keep all three kinds: a test that reads nothing passes) */
	assert_true(nallow > 0 && ndeny > 0 && nerr > 0);
	free(all);
}

/* The decision with the deny cache on equals the one with it off: each deny
 * of the file that the agent could receive, stored when its request was sent, answers at every later
 * instant before its deadline and reset exactly what the engines' reply
 * at that instant decides (t_contract checks that reply on both engines),
 * then no more; another cost is never answered from it. */
static void test_contract_deny_cache(void **state)
{
	size_t n, i, ndeny = 0, ngcra = 0;
	struct contract_pair *all = contract_load(contract_path(), &n);
	struct window_policy plain;
	const int64_t sent = 5000000;

	(void)state;
	memset(&plain, 0, sizeof(plain));
	plain.nwin = 1;
	plain.win[0].limit = 1;
	plain.win[0].window_ms = 1000;
	for (i = 0; i < n; i++) {
		const struct contract_pair *pr = &all[i];
		struct window_decision off, on;
		struct deny_cache dc;
		int64_t until, steps[3];
		unsigned k;

		plain.algorithm = pr->gcra ? WINDOW_ALGO_GCRA : WINDOW_ALGO_LOG;
		plain.pooled = pr->pooled;
		if (!pr->sendable || window_decide_reply(&plain, &pr->reply, &off) != 0 ||
		    !window_deny_holds(&plain, pr->cost, &off))
			continue;
		ndeny++;
		ngcra += pr->gcra;
		until = pr->reply.v[3] < pr->reply.v[4] ? pr->reply.v[3] : pr->reply.v[4];
		steps[0] = 0;
		steps[1] = until / 2;
		steps[2] = until - 1;
		deny_cache_init(&dc, 42);
		deny_cache_store(&dc, "p", 1, "k", 1, 0, pr->cost, sent, &off, sent);
		for (k = 0; k < 3; k++) {
			struct window_reply later = pr->reply;
			struct window_decision want;

			later.v[3] -= steps[k];
			later.v[4] -= steps[k];
			assert_int_equal(window_decide_reply(&plain, &later, &want), 0);
			if (!deny_cache_lookup(&dc, "p", 1, "k", 1, 0, pr->cost, sent + steps[k], &on))
				fail_msg("%s: no cached answer %lld us after", pr->where,
				         (long long)steps[k]);
			if (on.status != want.status || on.limit != want.limit ||
			    on.remaining != want.remaining || on.reset != want.reset ||
			    on.retry_after != want.retry_after || on.window != want.window ||
			    on.retry_after_us != want.retry_after_us || on.reset_us != want.reset_us)
				fail_msg("%s: %lld us after, the cache answers %lld %lld %lld %lld %u, "
				         "the engines %lld %lld %lld %lld %u",
				         pr->where, (long long)steps[k], (long long)on.limit,
				         (long long)on.remaining, (long long)on.reset,
				         (long long)on.retry_after, on.window, (long long)want.limit,
				         (long long)want.remaining, (long long)want.reset,
				         (long long)want.retry_after, want.window);
		}
		assert_false(deny_cache_lookup(&dc, "p", 1, "k", 1, 0, pr->cost + 1, sent, &on));
		deny_cache_store(&dc, "p", 1, "k", 1, 0, pr->cost, sent, &off, sent);
		assert_false(deny_cache_lookup(&dc, "p", 1, "k", 1, 0, pr->cost, sent + until, &on));
		deny_cache_clear(&dc);
	}
	printf("# contract: %zu denies answered again from the deny cache (%zu of GCRA)\n", ndeny,
	       ngcra);
	assert_true(ndeny > 0 && ngcra > 0);
	free(all);
}

/* One case of the file, as test_contract_stored reads it. */
#define CASE_TOKENS_MAX 128
struct contract_case {
	char name[128];
	int line;
	int64_t clock;                /* us after T0 */
	int nkeys, nargs, nafter;
	char keys[WINDOW_MAX_WINDOWS * 2][64];
	char args[CASE_TOKENS_MAX][64];
	struct {
		char key[64], kind[64];
		int nitems;
		char items[CASE_TOKENS_MAX][64];
	} after[8];
	int nreply;
	struct contract_pair reply;   /* the first reply */
	int nsettle;                  /* a settle's reply: its integers */
	int64_t settle[8];
};

#define T0_US 4000000000000000LL
#define T0_MS 4000000000000LL

/* Splits <line> into at most <max> words of <cap> bytes into <out>. */
static int contract_words(const char *line, char (*out)[64], int max)
{
	int n = 0, used;
	char w[64];

	while (n < max && sscanf(line, "%63s%n", w, &used) == 1) {
		snprintf(out[n++], 64, "%s", w);
		line += used;
	}
	return n;
}

/* Calls <fn> on each case of <path>; returns how many. */
static size_t contract_cases(const char *path, void (*fn)(const struct contract_case *c, void *arg),
                             void *arg)
{
	FILE *f = fopen(path, "r");
	char line[CONTRACT_LINE_MAX], copy[CONTRACT_LINE_MAX], w[CASE_TOKENS_MAX + 3][64];
	struct contract_case *c = calloc(1, sizeof(*c));
	size_t ncases = 0;
	int lineno = 0, n;

	if (!f)
		fail_msg("cannot open the contract %s (run from the repo root)", path);
	assert_non_null(c);
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');

		lineno++;
		if (hash)
			*hash = '\0';
		n = contract_words(line, w, CASE_TOKENS_MAX + 3);
		if (n == 0)
			continue;
		if (strcmp(w[0], "case") == 0) {
			memset(c, 0, sizeof(*c));
			snprintf(c->name, sizeof(c->name), "%s", w[1]);
			c->line = lineno;
		} else if (strcmp(w[0], "clock") == 0) {
			c->clock = strtoll(w[1], NULL, 10);
		} else if (strcmp(w[0], "keys") == 0) {
			for (c->nkeys = 0; c->nkeys + 1 < n && c->nkeys < WINDOW_MAX_WINDOWS * 2; c->nkeys++)
				snprintf(c->keys[c->nkeys], 64, "%s", w[c->nkeys + 1]);
		} else if (strcmp(w[0], "args") == 0) {
			for (c->nargs = 0; c->nargs + 1 < n && c->nargs < CASE_TOKENS_MAX; c->nargs++)
				snprintf(c->args[c->nargs], 64, "%s", w[c->nargs + 1]);
		} else if (strcmp(w[0], "after") == 0 && n >= 3 && strcmp(w[2], "ttl") != 0) {
			int k = c->nafter++;

			assert_true(k < 8);
			snprintf(c->after[k].key, 64, "%s", w[1]);
			snprintf(c->after[k].kind, 64, "%s", w[2]);
			for (c->after[k].nitems = 0; c->after[k].nitems + 3 < n; c->after[k].nitems++)
				snprintf(c->after[k].items[c->after[k].nitems], 64, "%s",
				         w[c->after[k].nitems + 3]);
		} else if (strcmp(w[0], "reply") == 0) {
			/* (a release's or a settle's reply is two integers, no
			 * decision's) */
			if (strcmp(c->args[0], "settle") == 0 && strcmp(w[1], "error") != 0)
				for (c->nsettle = 0; c->nsettle + 1 < n && c->nsettle < 8; c->nsettle++)
					c->settle[c->nsettle] = strtoll(w[c->nsettle + 1], NULL, 10);
			if (c->nreply++ == 0 && strcmp(c->args[0], "release") != 0 &&
			    strcmp(c->args[0], "settle") != 0) {
				snprintf(copy, sizeof(copy), "%s", line);
				if (contract_parse_reply(copy, &c->reply) == -1)
					fail_msg("%s:%d: bad reply line", path, lineno);
			}
		} else if (strcmp(w[0], "end") == 0) {
			if (c->reply.reply.kind == WINDOW_REPLY_ERROR)
				c->reply.reply.str = c->reply.err;
			fn(c, arg);
			ncases++;
		}
	}
	fclose(f);
	free(c);
	return ncases;
}

/* A time of the file: "=<x>" is x as it stands, else <base> + the number. */
static int64_t contract_time(const char *s, int64_t base)
{
	return s[0] == '=' ? strtoll(s + 1, NULL, 10) : base + strtoll(s, NULL, 10);
}

/* qsort order of log entries: by score, then member (Redis's order). */
static int contract_entry_cmp(const void *a, const void *b)
{
	const struct stored_entry *x = a, *y = b;

	if (x->score != y->score)
		return x->score < y->score ? -1 : 1;
	return strcmp(x->member, y->member);
}

/* Reads the "after" state of key <key> of <c> as window <spec> (a window
 * argument: "<ms>", "<ms>:<prec>" or "gcra:<ms>:<burst>", limit <limit>)
 * at the case's clock into <u>; stored_read_*()'s result. */
static int contract_read_after(const struct contract_case *c, const char *key, uint64_t limit,
                               const char *spec, struct stored_usage *u)
{
	struct stored_entry e[CASE_TOKENS_MAX / 2];
	struct stored_field f[CASE_TOKENS_MAX / 2];
	char fields[CASE_TOKENS_MAX / 2][32], value[160];
	struct window_limit lim = { .limit = limit };
	unsigned long long ms = 0, prec = 0, burst;
	int64_t now = T0_US + c->clock;
	size_t n = 0;
	int i, k, form, tz, anchor;   /* 0 log, 1 buckets, 2 gcra, 3 quota */
	char kind;

	if (sscanf(spec, "cal:%c:%d:%d", &kind, &tz, &anchor) == 3 && strchr("hdwm", kind)) {
		form = 3;
		lim.cal = (uint8_t)(WINDOW_CAL_HOUR + (strchr("hdwm", kind) - "hdwm"));
		lim.tz_min = (int16_t)tz;
		lim.anchor = (uint8_t)anchor;
	} else if (sscanf(spec, "gcra:%llu:%llu", &ms, &burst) == 2)
		form = 2, lim.burst = burst;
	else if (sscanf(spec, "%llu:%llu", &ms, &prec) == 2)
		form = 1;
	else if (sscanf(spec, "%llu", &ms) == 1)
		form = 0;
	else
		return -2;
	lim.window_ms = ms;
	for (k = 0; k < c->nafter && strcmp(c->after[k].key, key) != 0; k++)
		;
	if (k == c->nafter || strcmp(c->after[k].kind, "none") == 0) {
		if (form == 3)
			return stored_read_quota(NULL, 0, &lim, now, u);
		if (form == 2)
			return stored_read_gcra(NULL, 0, &lim, now, u);
		return form ? stored_read_buckets(NULL, 0, &lim, now, u)
		            : stored_read_log(NULL, 0, &lim, now, u);
	}
	if (form == 0 && strcmp(c->after[k].kind, "zset") == 0) {
		for (i = 0; i + 1 < c->after[k].nitems; i += 2, n++) {
			e[n].member = c->after[k].items[i];
			e[n].len = strlen(e[n].member);
			e[n].score = contract_time(c->after[k].items[i + 1], T0_US);
		}
		qsort(e, n, sizeof(*e), contract_entry_cmp);
		return stored_read_log(e, n, &lim, now, u);
	}
	if (form == 1 && strcmp(c->after[k].kind, "hash") == 0) {
		for (i = 0; i + 1 < c->after[k].nitems; i += 2, n++) {
			const char *fi = c->after[k].items[i];

			if (fi[0] == '=')
				snprintf(fields[n], sizeof(fields[n]), "%s", fi + 1);
			else
				snprintf(fields[n], sizeof(fields[n]), "%lld",
				         (long long)contract_time(fi, T0_MS));
			f[n].name = fields[n];
			f[n].name_len = strlen(fields[n]);
			f[n].value = c->after[k].items[i + 1];
			f[n].value_len = strlen(f[n].value);
		}
		return stored_read_buckets(f, n, &lim, now, u);
	}
	if (form >= 2 && strcmp(c->after[k].kind, "gcra") == 0) {
		int len = snprintf(value, sizeof(value), "%lld",
		                   (long long)contract_time(c->after[k].items[0], T0_US));

		for (i = 1; i < c->after[k].nitems; i++)
			len += snprintf(value + len, sizeof(value) - (size_t)len, ":%s",
			                c->after[k].items[i]);
		return (form == 3 ? stored_read_quota : stored_read_gcra)(value, (size_t)len, &lim, now, u);
	}
	if (form == 3 && strcmp(c->after[k].kind, "string") == 0 && c->after[k].nitems == 1)
		return stored_read_quota(c->after[k].items[0], strlen(c->after[k].items[0]), &lim, now,
		                         u);
	if (form == 2 && strcmp(c->after[k].kind, "string") == 0 && c->after[k].nitems == 1)
		return stored_read_gcra(c->after[k].items[0], strlen(c->after[k].items[0]), &lim, now,
		                        u);
	return -2;   /* a key of another type: the engines answer WRONGTYPE */
}

struct stored_tally {
	size_t log, buckets, gcra, quota, allow, deny, refused, stepped_back;
};

/* Is window <idx> of <c> bucketed, with the read's oldest bucket the one
 * this admission went into (Redis's clock stepped back behind a stored
 * bucket)? Then the engines' reset names the oldest bucket before the
 * admission, later than the one the read finds (the true oldest); the
 * rest of the reply must still agree. */
static bool contract_stepped_back(const struct contract_case *c, int idx,
                                  const struct stored_usage *u)
{
	unsigned long long ms, prec;
	int64_t now = T0_US + c->clock, end;

	if (sscanf(c->args[2 + 2 * idx], "%llu:%llu", &ms, &prec) != 2)
		return false;
	end = rl_args_bucket_end(now, (int64_t)prec) * 1000;
	return u->reset_us == end + (int64_t)ms * 1000 - now &&
	       (int64_t)u->quota == c->reply.reply.v[1] &&
	       (int64_t)u->remaining == c->reply.reply.v[2] && u->reset_us < c->reply.reply.v[3];
}

/*
 * One case: a single decision the agent sends (cost within every limit)
 * that the engines answered with a result. Its deciding window's key,
 * read after the decision at the decision's clock, must give the reply's
 * limit, remaining and reset:
 *   - an admission is recorded, so the read counts it, as the reply's
 *     remaining (limit - count - cost) and reset (its oldest unit) do;
 *   - a denial writes nothing but trims of units already out, so the read
 *     gives the denial's remaining (limit - count) and reset;
 *   - retry-after is not a reading: it depends on the request's cost.
 * A case the engines refuse with "bad entry" must read as refused (-1):
 * `ctl show` then shows the window full, as its decisions fail.
 */
static void contract_check_stored(const struct contract_case *c, void *arg)
{
	struct stored_tally *t = arg;
	const struct window_reply *r = &c->reply.reply;
	struct stored_usage u;
	unsigned long long cost;
	int i, nwin, idx, rc;

	if (c->nargs < 3 || strcmp(c->args[0], "batch") == 0 || c->nreply != 1 ||
	    sscanf(c->args[0], "%llu", &cost) != 1 || (c->nargs - 1) % 2 != 0)
		return;
	nwin = (c->nargs - 1) / 2;
	if (nwin != c->nkeys)
		return;
	/* (leases are no window: `ctl show` reads windows) */
	for (i = 0; i < c->nargs; i++)
		if (strncmp(c->args[i], "lease:", 6) == 0)
			return;
	if (r->kind == WINDOW_REPLY_ERROR) {
		if (!strstr(r->str, "bad entry"))
			return;
		for (i = 0, rc = 0; i < nwin && rc != -1; i++)
			rc = contract_read_after(c, c->keys[i], strtoull(c->args[1 + 2 * i], NULL, 10),
			                         c->args[2 + 2 * i], &u);
		if (rc != -1)
			fail_msg("%s (line %d): the engines refuse the stored data, the reader reads it",
			         c->name, c->line);
		t->refused++;
		return;
	}
	for (i = 0; i < nwin; i++) {
		unsigned long long l = strtoull(c->args[1 + 2 * i], NULL, 10), ms, b;

		if (sscanf(c->args[2 + 2 * i], "gcra:%llu:%llu", &ms, &b) == 2)
			l = b;
		if (cost > l)
			return;   /* never sent: the agent refuses it as bad-cost */
	}
	/* an unpooled decision's six integers (a pool's case is no window's) */
	if (r->kind != WINDOW_REPLY_INTEGERS || r->n != 6)
		return;
	idx = (int)r->v[5];
	rc = contract_read_after(c, c->keys[idx], strtoull(c->args[1 + 2 * idx], NULL, 10),
	                         c->args[2 + 2 * idx], &u);
	if (rc == 0 && r->v[0] == 1 && contract_stepped_back(c, idx, &u)) {
		t->stepped_back++;
		return;
	}
	if (rc != 0 || (int64_t)u.quota != r->v[1] || (int64_t)u.remaining != r->v[2] ||
	    u.reset_us != r->v[3])
		fail_msg("%s (line %d): the reader (%d) of %s after gives limit %llu remaining %llu "
		         "reset %lld us, the engines answered %lld %lld %lld", c->name, c->line, rc,
		         c->keys[idx], (unsigned long long)u.quota, (unsigned long long)u.remaining,
		         (long long)u.reset_us, (long long)r->v[1], (long long)r->v[2],
		         (long long)r->v[3]);
	if (strncmp(c->args[2 + 2 * idx], "gcra:", 5) == 0)
		t->gcra++;
	else if (strncmp(c->args[2 + 2 * idx], "cal:", 4) == 0)
		t->quota++;
	else if (strchr(c->args[2 + 2 * idx], ':'))
		t->buckets++;
	else
		t->log++;
	t->allow += r->v[0] == 1;
	t->deny += r->v[0] == 0;
}

/* `ctl show`'s reading (spoa/core/stored.c) agrees with the engines on
 * every case of the file it can be checked on (contract_check_stored). */
static void test_contract_stored(void **state)
{
	struct stored_tally t = { 0 };
	size_t n;

	(void)state;
	n = contract_cases(contract_path(), contract_check_stored, &t);
	printf("# contract: %zu cases; the stored state after read as the engines answered: "
	       "%zu log, %zu bucketed, %zu GCRA, %zu quota (%zu allow, %zu deny); %zu refused "
	       "alike; %zu admissions behind a stored bucket (clock stepped back)\n", n, t.log,
	       t.buckets, t.gcra, t.quota, t.allow, t.deny, t.refused, t.stepped_back);
	/* (every kind must be there: a test that reads nothing passes) */
	assert_true(t.log > 0 && t.buckets > 0 && t.gcra > 0 && t.quota > 0 && t.allow > 0 &&
	            t.deny > 0 &&
	            t.refused > 0);
}

struct settle_tally {
	size_t known, unknown;
};

/*
 * One settle case the engines answered: stored_read_settle() reads the
 * reply, and when it says what the windows have left (6 integers), each
 * window's key after the settle, read at its clock as `ctl show` reads
 * it, must give the same: the reply names the window with the least left
 * (a tie: the first) with its limit, remaining and reset, the fields the
 * settled response's RateLimit carries.
 */
static void contract_check_settle(const struct contract_case *c, void *arg)
{
	struct settle_tally *t = arg;
	struct stored_settle st;
	struct stored_usage u, best = { 0 };
	int i, nwin, idx = -1;

	if (strcmp(c->args[0], "settle") != 0 || c->nsettle == 0)
		return;
	nwin = (c->nargs - 2) / 2;
	if (stored_read_settle(c->settle, (size_t)c->nsettle, (unsigned)nwin, &st) == -1)
		fail_msg("%s (line %d): a settle's reply the agent does not read", c->name, c->line);
	if (!st.known) {
		t->unknown++;
		return;
	}
	for (i = 0; i < nwin; i++) {
		if (contract_read_after(c, c->keys[i], strtoull(c->args[2 + 2 * i], NULL, 10),
		                        c->args[3 + 2 * i], &u) != 0)
			fail_msg("%s (line %d): window %d unreadable, the engines read it", c->name,
			         c->line, i);
		if (idx < 0 || u.remaining < best.remaining) {
			best = u;
			idx = i;
		}
	}
	if (idx != (int)st.window || (int64_t)best.quota != st.limit ||
	    (int64_t)best.remaining != st.remaining || best.reset_us != st.reset_us)
		fail_msg("%s (line %d): the reader gives window %d limit %llu remaining %llu reset %lld, "
		         "the engines answered %u %lld %lld %lld", c->name, c->line, idx,
		         (unsigned long long)best.quota, (unsigned long long)best.remaining,
		         (long long)best.reset_us, st.window, (long long)st.limit,
		         (long long)st.remaining, (long long)st.reset_us);
	t->known++;
}

/* A settle's answer is what `ctl show` reads of its windows after it. */
static void test_contract_settle(void **state)
{
	struct settle_tally t = { 0 };
	const int64_t bad[][6] = {
		{ 2, 0, 0, 0, 0, 0 },   /* code */
		{ 1, 0, 0, 5, 0, 0 },   /* limit */
		{ 1, 0, 10, -1, 0, 0 }, /* remaining */
		{ 1, 0, 10, 5, -1, 0 }, /* reset */
		{ 1, 0, 10, 5, 0, 4 },  /* index past the windows */
	};
	struct stored_settle st;
	size_t i;

	(void)state;
	contract_cases(contract_path(), contract_check_settle, &t);
	printf("# contract: %zu settles answered what their windows have left, as read after; "
	       "%zu without it\n", t.known, t.unknown);
	assert_true(t.known >= 10 && t.unknown >= 2);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(stored_read_settle(bad[i], 6, 4, &st), -1);
	assert_int_equal(stored_read_settle(bad[0], 3, 4, &st), -1);
	assert_int_equal(stored_read_settle(bad[0], 2, 4, &st), -1);
}

struct pool_tally {
	size_t cases, refusals;
};

/*
 * One pooled case (its last argument "pool:<ms>:<headroom>:<account>"; its
 * last two keys the pool's log and hash) that the engines answered with a
 * result: the pool's log after, read at the case's clock as `ctl show-pool`
 * reads it, must give each account the units the engines' hash holds
 * (every decision, admitted or not, trims what left the window from both),
 * and a refusal by the pool its limit, remaining and reset.
 */
static void contract_check_pool(const struct contract_case *c, void *arg)
{
	struct pool_tally *t = arg;
	const struct window_reply *r = &c->reply.reply;
	struct stored_entry e[CASE_TOKENS_MAX / 2];
	struct stored_pool_account acc[CASE_TOKENS_MAX / 2];
	struct window_pool pl;
	struct stored_usage u;
	unsigned long long ms, head;
	const char *log, *hash;
	int64_t now = T0_US + c->clock;
	size_t n = 0, nacc = 0, i;
	int k, kh, j, found;

	memset(&pl, 0, sizeof(pl));
	if (c->nargs < 5 || c->nreply != 1 || strcmp(c->args[0], "batch") == 0 ||
	    sscanf(c->args[c->nargs - 1], "pool:%llu:%llu:", &ms, &head) != 2 ||
	    r->kind != WINDOW_REPLY_INTEGERS || r->n != 7 || c->nkeys < 3)
		return;
	pl.limit = strtoull(c->args[c->nargs - 2], NULL, 10);
	pl.window_ms = ms;
	pl.headroom = head;
	log = c->keys[c->nkeys - 2];
	hash = c->keys[c->nkeys - 1];
	for (k = 0; k < c->nafter && strcmp(c->after[k].key, log) != 0; k++)
		;
	for (kh = 0; kh < c->nafter && strcmp(c->after[kh].key, hash) != 0; kh++)
		;
	if (k < c->nafter && strcmp(c->after[k].kind, "zset") == 0) {
		for (j = 0; j + 1 < c->after[k].nitems; j += 2, n++) {
			e[n].member = c->after[k].items[j];
			e[n].len = strlen(e[n].member);
			e[n].score = contract_time(c->after[k].items[j + 1], T0_US);
		}
		qsort(e, n, sizeof(*e), contract_entry_cmp);
	}
	if (stored_read_pool(e, n, &pl, now, &u, acc, &nacc) != 0)
		fail_msg("%s (line %d): the pool's log read refused", c->name, c->line);
	/* the hash: "=<account> <units>" pairs, or none */
	found = kh < c->nafter && strcmp(c->after[kh].kind, "hash") == 0 ? c->after[kh].nitems / 2 : 0;
	if ((size_t)found != nacc)
		fail_msg("%s (line %d): %zu accounts in the pool's window, the hash holds %d", c->name,
		         c->line, nacc, found);
	for (i = 0; i < nacc; i++) {
		for (j = 0; j + 1 < c->after[kh].nitems; j += 2)
			if (strlen(c->after[kh].items[j]) == acc[i].len + 1 &&
			    memcmp(c->after[kh].items[j] + 1, acc[i].account, acc[i].len) == 0)
				break;
		if (j + 1 >= c->after[kh].nitems ||
		    strtoull(c->after[kh].items[j + 1], NULL, 10) != acc[i].units)
			fail_msg("%s (line %d): account %.*s holds %llu units in the window, not as "
			         "the hash says", c->name, c->line, (int)acc[i].len, acc[i].account,
			         (unsigned long long)acc[i].units);
		if (i && acc[i].units > acc[i - 1].units)
			fail_msg("%s (line %d): accounts not by units", c->name, c->line);
	}
	t->cases++;
	if (r->v[6] == 0)
		return;
	/* refused by the pool: its numbers (pool-share's room is below the headroom) */
	if ((int64_t)u.quota != r->v[1] || u.reset_us != r->v[3] ||
	    (int64_t)(r->v[6] == 1 ? u.remaining
	              : u.used + pl.headroom >= pl.limit ? 0 : pl.limit - pl.headroom - u.used) != r->v[2])
		fail_msg("%s (line %d): the pool read gives limit %llu used %llu reset %lld, the "
		         "engines answered %lld %lld %lld", c->name, c->line,
		         (unsigned long long)u.quota, (unsigned long long)u.used, (long long)u.reset_us,
		         (long long)r->v[1], (long long)r->v[2], (long long)r->v[3]);
	t->refusals++;
}

/* `ctl show-pool`'s reading of a pool (stored_read_pool) agrees with the
 * engines' hash and their pool refusals on every pooled case. */
static void test_contract_stored_pool(void **state)
{
	struct pool_tally t = { 0 };

	(void)state;
	contract_cases(contract_path(), contract_check_pool, &t);
	printf("# contract: %zu pooled cases read as the engines' hash; %zu pool refusals\n",
	       t.cases, t.refusals);
	assert_true(t.cases > 0 && t.refusals > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_contract_replies),
		cmocka_unit_test(test_contract_deny_cache),
		cmocka_unit_test(test_contract_stored),
		cmocka_unit_test(test_contract_settle),
		cmocka_unit_test(test_contract_stored_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
