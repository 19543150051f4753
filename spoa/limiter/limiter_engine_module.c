/*
 * limiter_engine_module - the module engine: RATELIMIT.DECIDE <numkeys>
 * <key>... <arg>..., the script's KEYS and ARGV as they are, answered with
 * the script's reply (module/). Nothing to load: its part of a link's
 * setup is the probe (COMMAND INFO ratelimit.decide, then
 * RATELIMIT.VERSION), whose verdict under redis-engine picks the link's
 * engine; a server without the module answers "ERR unknown command". See
 * limiter_engine.h.
 */
#include <stddef.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_engine.h"
#include "limiter_health.h"
#include "limiter_int.h"
#include "limiter_link.h"
#include "log.h"

#define LIMITER_MODULE_CMD "RATELIMIT.DECIDE"

/* window.c's "EVALSHA" <sha> becomes RATELIMIT.DECIDE alone: the first
 * word is not sent. */
static void limiter_module_head(const struct limiter_script *sc, bool full, const char **cmd,
                                size_t *cmd_len, const char **head, size_t *head_len, int *skip)
{
	(void)sc;
	(void)full;
	*cmd = "";
	*cmd_len = 0;
	*head = LIMITER_MODULE_CMD;
	*head_len = sizeof(LIMITER_MODULE_CMD) - 1;
	*skip = 1;
}

/* A new target for <k>: nothing known of its module. */
static void limiter_module_link_reset(struct limiter_link *k)
{
	k->module.probe_warned = false;
	k->module.probe_present = false;
	k->module.protocol = -1;
}

/*
 * COMMAND INFO ratelimit.decide answered on <ac>: does this Redis have the
 * module's command? Noted for the RATELIMIT.VERSION reply right behind it
 * (limiter_module_on_version), which decides.
 */
static void limiter_module_on_probe(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	bool only_module = k->l->engine_mode == LIMITER_ENGINE_ONLY_MODULE;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		if (!k->module.probe_warned)
			log_warn("redis_engine_unknown", "addr=%s reply=\"%.*s\" action=\"%s (give "
			         "the user +command|info)\"", k->addr, (int)reply->len, reply->str,
			         only_module ? "assuming RATELIMIT.DECIDE is there" : "using the script");
		k->module.probe_warned = true;
		k->module.probe_present = only_module;
	} else {
		k->module.probe_present = reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
		                          reply->element && reply->element[0] &&
		                          reply->element[0]->type == REDIS_REPLY_ARRAY &&
		                          reply->element[0]->elements > 0;
	}
}

/*
 * RATELIMIT.VERSION answered on <ac>, after the probe above: the module is
 * used only on a protocol this agent speaks (1 .. LIMITER_MODULE_PROTOCOL)
 * that decides every policy (l->module_protocol_min: 2 for gcra, 3 for a pool, 4 for a
 * calendar quota); a
 * module without the command (unknown command: before 1.1.0) speaks
 * protocol 1. auto: the module if present and spoken, else the script;
 * module: the module, and a Redis without it is refused (logged at error
 * once a streak, the link dropped and retried with backoff: every decision
 * is an error meanwhile, never an allow). A refused COMMAND INFO (an ACL
 * without +command|info) cannot tell: a warning once; auto keeps the
 * script, module assumes the command (a missing one fails every call
 * closed). Its part of the setup is then through; on a ready link (a
 * reload that changed redis-engine) it switches the engine.
 */
static void limiter_module_on_version(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	const redisReply *reply = r;
	bool only_module = l->engine_mode == LIMITER_ENGINE_ONLY_MODULE, present;
	long long protocol = 1;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, limiter_now_us());
	present = k->module.probe_present;
	if (present && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
	    reply->element[0]->type == REDIS_REPLY_INTEGER) {
		const redisReply *v = reply->element[1];
		bool text = v->type == REDIS_REPLY_STATUS || v->type == REDIS_REPLY_STRING;

		protocol = reply->element[0]->integer;
		if (protocol != k->module.protocol)
			log_info("module_version", "addr=%s protocol=%lld version=%.*s", k->addr, protocol,
			         text ? (int)v->len : 1, text ? v->str : "-");
	} else if (present && k->module.protocol != 1) {
		log_info("module_version", "addr=%s protocol=1 version=- (no RATELIMIT.VERSION: "
		         "a module before 1.1.0)", k->addr);
	}
	if (present)
		k->module.protocol = protocol;
	/* spoken: 1 .. LIMITER_MODULE_PROTOCOL, and at least what the policies
	 * need (an algorithm=gcra policy: a module of protocol 2) */
	if (present && (protocol < l->module_protocol_min || protocol > LIMITER_MODULE_PROTOCOL)) {
		if (only_module) {
			limiter_note_error(l, k->addr, "the module speaks another protocol (redis-engine module)");
			log_error("redis_engine_protocol", "addr=%s protocol=%lld speaks=%d needs=%lld "
			          "action=\"refusing decisions until the module and the agents speak one "
			          "protocol (upgrade order: docs/deployment.md)\"", k->addr, protocol,
			          LIMITER_MODULE_PROTOCOL, l->module_protocol_min);
			limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
			limiter_link_drop(k, "module protocol not spoken");
			return;
		}
		log_warn("redis_engine_protocol", "addr=%s protocol=%lld speaks=%d needs=%lld action=\"using "
		         "the script (upgrade order: docs/deployment.md)\"", k->addr, protocol,
		         LIMITER_MODULE_PROTOCOL, l->module_protocol_min);
		present = false;
	}
	if (only_module && !present) {
		limiter_note_error(l, k->addr, "RATELIMIT.DECIDE not found (redis-engine module)");
		if (k->state == LIMITER_ST_READY || limiter_link_count_failure(k))
			log_error("redis_engine_missing", "addr=%s engine=module action=\"refusing "
			          "decisions until Redis has the module (loadmodule, MODULE LOAD); "
			          "retrying with backoff\"", k->addr);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_drop(k, "RATELIMIT.DECIDE not found");
		return;
	}
	k->engine = present ? &limiter_engine_module : &limiter_engine_script;
	if (k->state == LIMITER_ST_READY)
		limiter_update_connected(l);
	limiter_link_setup_done(k);
}

/* The module's part of <k>'s setup: COMMAND INFO ratelimit.decide, then
 * RATELIMIT.VERSION (answered in that order). */
static void limiter_module_setup(struct limiter_link *k)
{
	k->module.probe_present = false;
	redisAsyncCommand(k->ac, limiter_module_on_probe, NULL, "COMMAND INFO ratelimit.decide");
	redisAsyncCommand(k->ac, limiter_module_on_version, NULL, "RATELIMIT.VERSION");
}

/*
 * A call sent to <k> with the module was answered "unknown command" on
 * <ac> (MODULE UNLOAD at runtime, or a failover to a Redis without it).
 * auto: <k> decides with the script from now on (logged at warn) and the
 * caller re-sends as EVAL: true. module: logged at error, <k> dropped so
 * that its next setup asks again (and refuses until the module is back):
 * false, the caller answers the call with the error. Never an allow.
 */
static bool limiter_module_gone(struct limiter_link *k, const redisAsyncContext *ac)
{
	struct limiter *l = k->l;

	if (l->engine_mode != LIMITER_ENGINE_ONLY_MODULE) {
		if (ac == k->ac && k->engine == &limiter_engine_module) {
			log_warn("redis_engine_missing", "addr=%s engine=module action=\"RATELIMIT.DECIDE "
			         "is gone: deciding with the script\"", k->addr);
			k->engine = &limiter_engine_script;
			limiter_update_connected(l);
		}
		return true;
	}
	if (ac == k->ac) {
		limiter_note_error(l, k->addr, "RATELIMIT.DECIDE is gone (redis-engine module)");
		log_error("redis_engine_missing", "addr=%s engine=module action=\"RATELIMIT.DECIDE is "
		          "gone: refusing decisions until Redis has the module\"", k->addr);
		limiter_link_drop(k, "RATELIMIT.DECIDE is gone");
	}
	return false;
}

const struct limiter_engine limiter_engine_module = {
	.id = LIMITER_ENGINE_MODULE,
	.name = "module",
	.head = limiter_module_head,
	.setup = limiter_module_setup,
	.gone = limiter_module_gone,
	.link_reset = limiter_module_link_reset,
};
