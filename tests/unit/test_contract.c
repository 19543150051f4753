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
};

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
	bool sendable = false, gcra = false, pooled = false;
	uint64_t cost = 0;

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_contract_replies),
		cmocka_unit_test(test_contract_deny_cache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
