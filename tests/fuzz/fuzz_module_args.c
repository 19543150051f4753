/*
 * fuzz_module_args - libFuzzer harness for the module's argument parser
 * (module/rl_args.c: RATELIMIT.DECIDE's ARGV, the stored members, bucket
 * ends).
 *
 * The input's first byte is the key count; the rest is split at '\n' into
 * arguments (each copied to a buffer of its own size, so that ASan sees a
 * read past an argument's end). Parsed as a single decision or a batch as
 * the module would, every decision of an accepted batch walked. Invariants
 * checked with abort(): an accepted decision has 1..RL_MAX_WINDOWS windows
 * whose keys are inside the key count and whose values are in bounds; an
 * accepted batch's decisions use every key exactly once, in order; every
 * argument also goes through the member parser, and a member that parses
 * formats back to a string that parses to the same values; a bucket end
 * is after the time it holds and at most one precision later. A GCRA
 * decision (one window, its span bounded) is decided over stored TATs
 * around its bucket's edges: an admission leaves the bucket within its
 * burst and asks no wait, a denial asks one; the arithmetic never
 * overflows (UBSan in the fuzz build); a stored TAT formats back to what
 * it parsed from.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../module/rl_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_ARGS 512

/* Borrows <d>: the bounds every accepted decision keeps. */
static void check_decision(const struct rl_decision *d, size_t nkeys)
{
	size_t i;

	if (d->nwin < 1 || d->nwin > RL_MAX_WINDOWS || d->key0 + d->nwin > nkeys)
		abort();
	if (d->cost < 1 || d->cost > RL_MAX_UNITS)
		abort();
	for (i = 0; i < d->nwin; i++) {
		const struct rl_window *w = &d->w[i];

		if (w->limit < 1 || w->limit > RL_MAX_UNITS)
			abort();
		/* leases ("lease:<ms>:<id>") and quotas ("cal:...") have no
		 * window length: their own bounds */
		if (w->lease_ms) {
			if (w->win_ms || w->prec_ms || w->burst || w->cal || w->lease_ms > RL_MAX_MS ||
			    !w->lease_id || w->lease_id_len < 1)
				abort();
			continue;
		}
		if (w->cal) {
			if (w->win_ms || w->prec_ms || w->burst)
				abort();
			continue;
		}
		if (w->win_ms < 1 || w->win_ms > RL_MAX_MS || w->prec_ms < 0 || w->prec_ms > RL_MAX_MS)
			abort();
		if (w->burst && (d->nwin != 1 || w->prec_ms || w->burst < 1 ||
		                 w->burst * w->win_ms * 1000 > RL_GCRA_MAX_SPAN))
			abort();
	}
}

/* Borrows <w>, <v>: one GCRA decision over stored <v> at <now>: an
 * admission leaves the bucket within its burst and asks no wait, a denial
 * asks one. Returns what rl_args_gcra() did. */
static int check_gcra_one(const struct rl_window *w, int64_t cost, int64_t now,
                          const struct rl_gcra_value *v)
{
	int64_t full = w->burst * w->win_ms * 1000 / w->limit;
	struct rl_gcra g;

	if (rl_args_gcra(w, cost, now, v, &g) == -1)
		return -1;
	if (g.remaining < 0 || g.remaining > w->burst || g.reset < 0 || g.retry < 0)
		abort();
	if (g.allowed && (g.retry != 0 || g.tat - now > full + 1 || g.frac < 0 ||
	                  g.frac >= w->limit || g.ttl_ms < 2))
		abort();
	if (!g.allowed && g.retry < 1)
		abort();
	return 0;
}

/* Borrows <d> (a GCRA decision): decided over stored TATs at and around
 * the edges of its bucket (the fuzzed numbers are the window's), from
 * now, 2^53 and a clock before 1970; in the 2-field form, and written
 * under another rate (the limit and window swapped) owing a whole
 * bucket's time and one. */
static void check_gcra(const struct rl_decision *d)
{
	const struct rl_window *w = &d->w[0];
	int64_t span = w->burst * w->win_ms * 1000, full = span / w->limit;
	int64_t nows[] = { 1800000000000000LL, 0, -4000000000000000LL };
	int64_t ahead[] = { -1, 0, 1, full - 1, full, full + 1, span };
	int64_t fracs[] = { 0, 1, w->limit - 1, w->limit, RL_MAX_MEMBER };
	size_t i, j, k;

	for (i = 0; i < sizeof(nows) / sizeof(nows[0]); i++)
		for (j = 0; j < sizeof(ahead) / sizeof(ahead[0]); j++)
			for (k = 0; k < sizeof(fracs) / sizeof(fracs[0]); k++) {
				int64_t now = nows[i], tat = now + ahead[j];
				struct rl_gcra_value v2 = { tat, fracs[k], 0, 0, 0 };
				struct rl_gcra_value v5 = { tat, fracs[k],
				                            w->limit > RL_MAX_MS ? RL_MAX_MS : w->limit,
				                            w->win_ms, full + 1 };

				if (tat < 0)
					continue;
				if (check_gcra_one(w, d->cost, now, &v2) == -1)
					abort();
				/* (-1: written too far ahead of now, refused) */
				if (v5.owed <= v5.tat)
					(void)check_gcra_one(w, d->cost, now, &v5);
			}
}

/* Borrows <p>: member round trip and bucket end bounds. */
static void check_member(const char *p, size_t len)
{
	int64_t cum, cost, cum2, cost2, v;
	struct rl_gcra_value g, g2;
	char buf[96];
	size_t n;

	if (rl_args_parse_gcra(p, len, &g) == 0) {
		n = rl_args_format_gcra(buf, sizeof(buf), &g);
		if (n == 0 || rl_args_parse_gcra(buf, n, &g2) != 0 || memcmp(&g, &g2, sizeof(g)) != 0 ||
		    g.tat < 0 || g.frac < 0 || g.owed < 0 || g.owed > g.tat)
			abort();
	}
	if (rl_args_parse_member(p, len, &cum, &cost) == 0) {
		if (cum < 0 || cost < 0 || cum > RL_MAX_MEMBER || cost > RL_MAX_MEMBER)
			abort();
		n = rl_args_format_member(buf, sizeof(buf), cum, cost);
		if (n == 0 || rl_args_parse_member(buf, n, &cum2, &cost2) != 0 || cum2 != cum ||
		    cost2 != cost)
			abort();
	}
	if (rl_args_parse_int(p, len, &v) == 0 && v > -RL_MAX_MEMBER && v < RL_MAX_MEMBER) {
		int64_t prec = (v < 0 ? -v : v) % 100000 + 1, e = rl_args_bucket_end(v, prec);

		/* the bucket holds <v> (us): its end (ms) is after it, by at most
		 * one precision */
		if (!(e * 1000 > v && (e - prec) * 1000 <= v))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rl_arg args[FUZZ_MAX_ARGS];
	char *bufs[FUZZ_MAX_ARGS];
	struct rl_decision d;
	size_t nargs = 0, nkeys, i, start, n;

	if (size < 1)
		return 0;
	nkeys = data[0];
	start = 1;
	for (i = 1; i <= size && nargs < FUZZ_MAX_ARGS; i++) {
		if (i == size || data[i] == '\n') {
			size_t len = i - start;

			bufs[nargs] = malloc(len ? len : 1);
			if (!bufs[nargs])
				break;
			memcpy(bufs[nargs], data + start, len);
			args[nargs].p = bufs[nargs];
			args[nargs].len = len;
			nargs++;
			start = i + 1;
		}
	}
	for (i = 0; i < nargs; i++)
		check_member(args[i].p, args[i].len);

	if (!rl_args_is_batch(args, nargs)) {
		if (rl_args_parse_single(args, nargs, nkeys, &d) == RL_OK) {
			check_decision(&d, nkeys);
			if (d.nwin != nkeys || nargs != 1 + 2 * nkeys)
				abort();
			if (d.w[0].burst)
				check_gcra(&d);
		}
	} else if (rl_args_batch_check(args, nargs, nkeys, &n) == RL_OK) {
		struct rl_batch_iter it = { 0, 2 };
		size_t k;

		if (n < 1)
			abort();
		for (k = 0; k < n; k++) {
			size_t key0 = it.ki;
			enum rl_err e = rl_args_batch_next(args, &it, &d);

			if (e == RL_OK) {
				check_decision(&d, nkeys);
				if (d.key0 != key0 || it.ki != key0 + d.nwin)
					abort();
			} else if (e != RL_ERR_ARGS && e != RL_ERR_WINDOW) {
				abort();
			}
			if (it.ki > nkeys || it.ai > nargs)
				abort();
		}
		if (it.ki != nkeys || it.ai != nargs)
			abort();
	}
	for (i = 0; i < nargs; i++)
		free(bufs[i]);
	return 0;
}
