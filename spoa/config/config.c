/*
 * config - the configuration's public face (see config.h): a parse runs
 * each line through the table of directives (config_directives.c, with
 * policy, override and live-max in config_policy.c), config_init() gives
 * the table's defaults, --help's directive list is printed from the table;
 * copies and lookups. The checks of addresses, URLs, the whole config and a
 * routes map are config_check.c and config_routes.c. Lines and words come
 * from config_lex.c; nothing is copied until a directive accepts a word.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"

/* "<n>ms|s|m|h" in <s>/<len> to <*ms>. Returns 0 or -1. The rule is
 * config_check_duration(), which the directive parsers share. */
int config_parse_duration(const char *s, size_t len, uint64_t *ms)
{
	return config_check_duration(s, len, ms);
}

/* Name of <l> ("error", ...); "unknown" outside the enum. Static storage. */
const char *config_log_level_str(enum config_log_level l)
{
	if ((unsigned)l >= CONFIG_LOG_COUNT)
		return "unknown";
	return config_log_level_names[l];
}

/* Print one line of --help's directive list: <first> (the name and what
 * follows it, the last of its lines <last_len> columns wide) then the first
 * help line <h>/<hlen> at column 30, beside it when it fits in 80 columns,
 * else below. */
static void print_first_help_line(FILE *f, size_t last_len, const char *h, size_t hlen)
{
	if (last_len <= 28)
		fprintf(f, "%*s", (int)(30 - last_len), "");
	else if (last_len + 2 + hlen <= 80)
		fputs("  ", f);
	else
		fprintf(f, "\n%30s", "");
	fprintf(f, "%.*s\n", (int)hlen, h);
}

/* --help's list of the directives, from the table: each "  <name> <args>"
 * and its help lines, indented to column 30. */
void config_print_directives(FILE *f)
{
	size_t i;

	for (i = 0; i < config_ndirectives; i++) {
		const struct config_directive *d = &config_directives[i];
		const char *h = d->help, *nl, *last;
		size_t col;

		fprintf(f, "  %s%s%s", d->name, d->args[0] ? " " : "", d->args);
		last = strrchr(d->args, '\n');
		col = last ? strlen(last + 1) : 2 + strlen(d->name) + (d->args[0] ? 1 + strlen(d->args) : 0);
		nl = strchr(h, '\n');
		print_first_help_line(f, col, h, nl ? (size_t)(nl - h) : strlen(h));
		while (nl) {
			h = nl + 1;
			nl = strchr(h, '\n');
			fprintf(f, "%30s%.*s\n", "", nl ? (int)(nl - h) : (int)strlen(h), h);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                    */
/* ------------------------------------------------------------------------ */

/* Parse <text>/<len> named <name> into <c>; see config.h. Overrides get
 * allocated inside <c> (owned by it: config_release()). */
int config_parse(struct config *c, const char *name, const char *text, size_t len,
                 char *err, size_t errlen)
{
	struct parse_ctx x;
	/* config_next_line() fills it; initialised for clang-analyzer */
	struct word w[CONFIG_MAX_WORDS] = { { NULL, 0 } };
	const char *p = text, *end = text + len, *line;
	size_t i, line_len;
	int n, rc = -1;

	memset(&x, 0, sizeof(x));
	x.c = c;
	x.lex.name = name ? name : "config";
	x.lex.err = err;
	x.lex.errlen = errlen;
	for (i = 0; i < c->npolicies; i++) {
		x.ov_first[i] = c->policies[i].noverrides;
		x.ov_cap[i] = c->policies[i].noverrides;
	}
	if (err && errlen)
		err[0] = '\0';
	/* editors on some systems start a UTF-8 file with a byte order mark */
	if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
		p += 3;

	while ((n = config_next_line(&x.lex, &p, end, w, &line, &line_len)) > 0)
		if (config_directive_run(&x, w, (size_t)n) == -1)
			goto out;
	if (n == -1)
		goto out;
	for (i = 0; i < c->npolicies; i++) {
		if (c->policies[i].noverrides > x.ov_first[i] && config_overrides_finish(&x, i) == -1)
			goto out;
	}
	/* plan-default may come before the plan lines: checked once all are read */
	if (c->plan_default_len && !config_plan_known(c, c->plan_default, c->plan_default_len)) {
		x.lex.line = c->plan_default_line;
		config_parse_fail(&x.lex, "plan-default: no policy has a plan '%s' (write "
		                  "'plan %s <policy> <limit>/<window>...')", c->plan_default,
		                  c->plan_default);
		goto out;
	}
	rc = 0;
out:
	for (i = 0; i < CONFIG_MAX_POLICIES; i++) {
		free(x.ov_line[i]);
		x.ov_line[i] = NULL;
	}
	return rc;
}

/* Read <path> whole and parse it into <c> (see config_parse()). The file's
 * bytes are a temporary buffer owned here; overrides go to <c>. */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc;

	if (config_read_file(path, &buf, &len, err, errlen) == -1)
		return -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	rc = config_parse(c, path, buf, len, err, errlen);
	free(buf);
	return rc;
}

/* The table's defaults into <c>; it owns nothing yet. */
void config_init(struct config *c)
{
	memset(c, 0, sizeof(*c));
	config_directives_defaults(c);
}

/* Free the override and plan tables <c> owns; <c> stays usable (without
 * overrides and plans). */
void config_release(struct config *c)
{
	size_t i;

	for (i = 0; i < c->npolicies; i++) {
		free(c->policies[i].overrides);
		c->policies[i].overrides = NULL;
		c->policies[i].noverrides = 0;
		free(c->policies[i].plans);
		c->policies[i].plans = NULL;
		c->policies[i].nplans = 0;
	}
}

/* Deep copy of <src> into <dst>, which owns its own override tables after
 * (whatever <dst> held is overwritten, not freed). Returns 0 or -1. */
int config_copy(struct config *dst, const struct config *src)
{
	size_t i;

	memcpy(dst, src, sizeof(*dst));
	for (i = 0; i < dst->npolicies; i++) {
		dst->policies[i].overrides = NULL;
		dst->policies[i].plans = NULL;
	}
	for (i = 0; i < dst->npolicies; i++) {
		const struct window_policy *sp = &src->policies[i];
		struct window_policy *dp = &dst->policies[i];

		if (sp->noverrides)
			dp->overrides = malloc(sp->noverrides * sizeof(*dp->overrides));
		if (sp->nplans)
			dp->plans = malloc(sp->nplans * sizeof(*dp->plans));
		if ((sp->noverrides && !dp->overrides) || (sp->nplans && !dp->plans)) {
			/* Leave <dst> consistent: counts match what is allocated. */
			if (!dp->overrides)
				dp->noverrides = 0;
			if (!dp->plans)
				dp->nplans = 0;
			for (i = i + 1; i < dst->npolicies; i++) {
				dst->policies[i].noverrides = 0;
				dst->policies[i].nplans = 0;
			}
			config_release(dst);
			return -1;
		}
		if (sp->noverrides)
			memcpy(dp->overrides, sp->overrides, sp->noverrides * sizeof(*dp->overrides));
		if (sp->nplans)
			memcpy(dp->plans, sp->plans, sp->nplans * sizeof(*dp->plans));
	}
	return 0;
}

/* The policy of <c> named <name>/<len>, or NULL. Borrowed from <c>. */
const struct window_policy *config_find_policy(const struct config *c,
                                               const char *name, size_t len)
{
	return config_policy_named(c, name, len);
}

/* Does a policy of <c> have plan <name>/<len>? A walk of every plan line:
 * only an unknown plan's request and the checks ask it. */
bool config_plan_known(const struct config *c, const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < c->npolicies; i++)
		if (window_plan_find(&c->policies[i], name, len))
			return true;
	return false;
}
