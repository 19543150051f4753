#!/usr/bin/env python3
"""bench-report - `make bench`'s report, from the results file of a run.

    tools/bench-report.py RESULTS.TSV OUT.md PLOT.svg TMPDIR

Called by tools/bench.sh (BENCH_RENDER=FILE redoes only this step)."""
# results.tsv -> the table on stdout, the generated section of
# docs/benchmarks.md (between the bench:begin/end markers; text outside them
# is kept) and the plot (gnuplot, tools/bench-plot.gp).
import os, subprocess, sys

tsv, out, plot, tmp = sys.argv[1:5]
R = {}
for line in open(tsv):
    k, _, v = line.rstrip('\n').partition('\t')
    R[k] = v.replace('\\n', '\n')

def num(k):
    try:
        return float(R.get(k, ''))
    except ValueError:
        return None

def n0(v):
    return '-' if v is None else f'{v:,.0f}'

def us(v):
    return '-' if v is None else (f'{v:,.0f}' if v >= 100 else f'{v:.1f}')

def ms(v):
    return '-' if v is None else f'{v / 1000:.1f}'

def rounds_of(a, b):
    """Per-round ratios a_rI_rps / b_rI_rps (the two sides of round I ran
    back to back)."""
    out, i = [], 1
    while f'{a}_r{i}_rps' in R or f'{b}_r{i}_rps' in R:
        x, y = num(f'{a}_r{i}_rps'), num(f'{b}_r{i}_rps')
        if x is not None and y:
            out.append(x / y)
        i += 1
    return out

def ratio(a, b):
    """Median of the per-round ratios of runs <a> and <b> (key prefixes):
    pairing rounds cancels the drift of a shared machine between rounds."""
    rs = sorted(rounds_of(a, b))
    if rs:
        return rs[(len(rs) - 1) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2
    x, y = num(a + '_rps'), num(b + '_rps')
    return None if x is None or not y else x / y

def pct(r):
    return '-' if r is None else f'{100 * r:.0f}%'

def rtxt(a, b, what=''):
    """'66% of X (62/66/70)': the paired median and every round."""
    r = ratio(a, b)
    rs = rounds_of(a, b)
    s = pct(r) + (f' {what}' if what else '')
    if len(rs) > 1:
        s += ' (' + '/'.join(f'{100 * x:.0f}' for x in rs) + ')'
    return s

c1, c16, hot, mp = R.get('c_p1'), R.get('c_p16'), R.get('hot'), R.get('mixed_pct')
rounds = R.get('rounds')

# --- (a)/(b) ---------------------------------------------------------------
ab = []     # run, in flight, rps, p50, p99, p999, ratio, rounds, notes
def ab_row(run, inflight, k, rat='', notes=''):
    ab.append((run, inflight, n0(num(k + '_rps')), us(num(k + '_p50')), us(num(k + '_p99')),
               us(num(k + '_p999')), rat, R.get(k + '_rounds', '-'), notes))
def dec(k):
    if k + '_allow' not in R:
        return ''
    s = f"allow {R[k + '_allow']}, deny {R[k + '_deny']}, error {R[k + '_error']}"
    if k + '_cache' in R:
        s += f"; {R[k + '_cache']} from the deny cache"
    return s
r_b1, r_b16 = ratio('sb_p1', 'rb_p1'), ratio('sb_p16', 'rb_p16')
ab_row(f'(a) redis-benchmark EVALSHA, {c1} conns x pipeline 1', c1, 'rb_p1')
ab_row(f'(b) spoa-bench {c1} conns x depth 1 -> agent -> Redis', c1, 'sb_p1',
       rtxt('sb_p1', 'rb_p1', 'of (a)'), dec('sb_p1'))
ab_row(f'(a) redis-benchmark EVALSHA, {c16} conns x pipeline 16', str(int(c16) * 16), 'rb_p16')
ab_row(f'(b) spoa-bench {c16} conns x depth 16 -> agent -> Redis', str(int(c16) * 16), 'sb_p16',
       rtxt('sb_p16', 'rb_p16', 'of (a)'), dec('sb_p16'))
ab_row(f'(b) mixed: {mp}% of requests on {hot} accounts', str(int(c16) * 16), 'sb_mixed',
       rtxt('sb_mixed', 'sb_p16', 'of uniform'), dec('sb_mixed'))
ab_row(f'(b) abuse: every request on {hot} accounts', str(int(c16) * 16), 'sb_abuse',
       rtxt('sb_abuse', 'sb_p16', 'of uniform'), dec('sb_abuse'))
if 'sb_abuse_nocache_rps' in R:
    ab_row('(b) abuse, deny cache off', str(int(c16) * 16), 'sb_abuse_nocache',
           rtxt('sb_abuse_nocache', 'sb_p16', 'of uniform'), dec('sb_abuse_nocache'))

# --- (c) ---------------------------------------------------------------------
cc = []     # scenario, alone rps, e2e rps, ratio, alone p50/p99, e2e p50/p99, statuses, rounds
def st(k):
    if k + '_201' not in R:
        return '-'
    s = ' '.join(f'{c}: {R.get(k + "_" + c) or 0}' for c in ('201', '429', '503', '401'))
    if R.get(k + '_other') not in (None, '', '0'):
        s += f" other: {R[k + '_other']}"
    if k + '_cache' in R:
        s += f"; deny cache answers: {R[k + '_cache']}"
    return s
def c_row(label, alone, full):
    a, f = f'wrk_{alone}', f'wrk_{full}'
    cc.append((label, n0(num(a + '_rps')), n0(num(f + '_rps')),
               rtxt(f, a),
               f"{ms(num(a + '_p50'))} / {ms(num(a + '_p99'))}",
               f"{ms(num(f + '_p50'))} / {ms(num(f + '_p99'))}", st(f),
               f"{R.get(a + '_rounds', '-')} vs {R.get(f + '_rounds', '-')}"))
c_row(f"uniform: {R.get('accounts')} accounts, all allowed", 'alone_uniform', 'full_uniform')
c_row(f'mixed: {mp}% of requests on {hot} accounts over their limit', 'alone_mixed', 'full_mixed')
c_row(f'abuse: every request from {hot} accounts over their limit', 'alone_abuse', 'full_abuse')
shape1 = f"-t{R.get('wrk_threads')} -c{R.get('wrk_conns')}"
shape2 = R.get('shape2', '')
for sfx, sh in (('', shape1), (f'_s{shape2}', '-t{} -c{}'.format(*shape2.split('x')) if shape2 else '')):
    if f'wrk_alone_nojwt{sfx}_rps' not in R:
        continue
    if f'wrk_full_nojwt_floor{sfx}_rps' in R:
        c_row(f'uniform, no JWT (identity from a plain header), {sh}: SPOE floor (bench/spoa-floor)',
              f'alone_nojwt{sfx}', f'full_nojwt_floor{sfx}')
    c_row(f'uniform, no JWT, {sh}: script engine', f'alone_nojwt{sfx}', f'full_nojwt{sfx}')
    if f'wrk_full_nojwt_mod{sfx}_rps' in R:
        c_row(f'uniform, no JWT, {sh}: module engine (RATELIMIT.DECIDE)', f'alone_nojwt{sfx}', f'full_nojwt_mod{sfx}')
for scen in ('mixed', 'abuse'):
    if f'wrk_full_{scen}_nocache_rps' in R:
        c_row(f'{scen}, deny cache off', f'alone_{scen}_nc', f'full_{scen}_nocache')

# --- (f) Redis per decision, batched vs redis-batch 1 --------------------------
bon = R.get('batch_on', '32')
ff = []     # in flight, redis-batch, decisions/s, Redis CPU us, script us, decisions/call
f_ratio = {}
for n in (c1, str(int(c16) * 16) if c16 else None):
    if n is None:
        continue
    for b in (bon, '1'):
        k = f'rf_rb{b}_{n}'
        ff.append((n, b, n0(num(k + '_rps')), R.get(k + '_cpu_us', '-'), R.get(k + '_usec', '-'),
                   R.get(k + '_per_call', '-'), R.get(k + '_rounds', '-')))
    x, y = num(f'rf_rb{bon}_{n}_cpu_us'), num(f'rf_rb1_{n}_cpu_us')
    f_ratio[n] = None if x is None or not y else x / y

# --- (i) Redis instructions per decision (callgrind) ----------------------------
ii = [(b, n0(num(f'ir_b{b}')), '-' if num(f'ir_b{b}') is None or not num('ir_b1') else
       f"{num(f'ir_b{b}') / num('ir_b1'):.2f}x") for b in ('32', '3', '1') if f'ir_b{b}' in R]
i_ratio = None if num('ir_b32') is None or not num('ir_b1') else num('ir_b32') / num('ir_b1')
# the module (RATELIMIT.DECIDE) beside the script, when tools/bench-redis-ir.sh measured it
def vs(a, b):
    return '-' if num(a) is None or not num(b) else f"{num(a) / num(b):.2f}x"
im = [(b, n0(num(f'ir_b{b}')), n0(num(f'ir_mod_b{b}')), vs(f'ir_mod_b{b}', f'ir_b{b}'))
      for b in ('32', '3', '1') if f'ir_mod_b{b}' in R]
cm = [(b, R.get(f'cpu_us_script_b{b}', '-'), R.get(f'cpu_us_module_b{b}', '-'),
       vs(f'cpu_us_module_b{b}', f'cpu_us_script_b{b}'))
      for b in ('32', '1') if f'cpu_us_module_b{b}' in R]
m_ratio = None if num('ir_mod_b32') is None or not num('ir_b32') else num('ir_mod_b32') / num('ir_b32')
# GCRA (algorithm=gcra) beside the log, each engine, when tools/bench-redis-ir.sh measured it
ig = [(b, n0(num(f'ir_b{b}')), n0(num(f'ir_gcra_b{b}')), vs(f'ir_gcra_b{b}', f'ir_b{b}'),
       n0(num(f'ir_mod_b{b}')), n0(num(f'ir_gcra_mod_b{b}')), vs(f'ir_gcra_mod_b{b}', f'ir_mod_b{b}'))
      for b in ('32', '3', '1') if f'ir_gcra_b{b}' in R or f'ir_gcra_mod_b{b}' in R]
IG_HEAD = ('redis-batch', 'log: script', 'gcra: script', 'gcra vs log', 'log: module', 'gcra: module',
           'gcra vs log')
# a pooled decision (every account in one pool) beside an unpooled one: instructions, each engine,
# and one pool's decisions per second (its keys in one slot: one Redis core)
ip = [(b, n0(num(f'ir_b{b}')), n0(num(f'ir_pool_b{b}')), vs(f'ir_pool_b{b}', f'ir_b{b}'),
       n0(num(f'ir_mod_b{b}')), n0(num(f'ir_pool_mod_b{b}')), vs(f'ir_pool_mod_b{b}', f'ir_mod_b{b}'))
      for b in ('32', '3', '1') if f'ir_pool_b{b}' in R or f'ir_pool_mod_b{b}' in R]
IP_HEAD = ('redis-batch', 'log: script', 'pooled: script', 'pooled vs log', 'log: module', 'pooled: module',
           'pooled vs log')
cp = [(b, R.get(f'cpu_us_script_b{b}', '-'), R.get(f'cpu_us_pool_script_b{b}', '-'),
       n0(num(f'pool_dps_script_b{b}')), R.get(f'cpu_us_module_b{b}', '-'),
       R.get(f'cpu_us_pool_module_b{b}', '-'), n0(num(f'pool_dps_module_b{b}')))
      for b in ('32', '1') if f'cpu_us_pool_script_b{b}' in R or f'cpu_us_pool_module_b{b}' in R]
CP_HEAD = ('redis-batch', 'script: Redis CPU µs, log', 'pooled', 'one pool: decisions/s',
           'module: Redis CPU µs, log', 'pooled', 'one pool: decisions/s')

# --- targets -------------------------------------------------------------------
def verdict(ok):
    return '-' if ok is None else ('met' if ok else 'MISSED')
def margin(r, floor):
    return '' if r is None else f'{100 * (r - floor):+.0f} pts'

r_uni = ratio('wrk_full_uniform', 'wrk_alone_uniform')
r_nojwt = ratio('wrk_full_nojwt', 'wrk_alone_nojwt')
r_mod_rounds = rounds_of('wrk_full_nojwt_mod', 'wrk_alone_nojwt')
r_mod_min = min(r_mod_rounds) if r_mod_rounds else None
def median_round(k):
    """The round whose run pick_median chose for k (its rps is k's)."""
    i = 1
    while f'{k}_r{i}_rps' in R:
        if R[f'{k}_r{i}_rps'] == R.get(k + '_rps'):
            return i
        i += 1
    return None
def nojwt_cpu(k):
    """CPU per request of each process of one no-JWT e2e row, its median
    round (HAProxy alone: the same round's)."""
    i = median_round(k)
    alone = R.get(f'wrk_alone_nojwt_r{i}_cpu_us', '-') if i else R.get('wrk_alone_nojwt_cpu_us', '-')
    return (f"HAProxy {alone} alone / {R.get(k + '_cpu_us', '-')} e2e, "
            f"agent {R.get(k + '_agent_us', '-')}, redis-server {R.get(k + '_redis_us', '-')} µs")
def nojwt_cpu_rounds(k):
    """The same, round by round: 'rI: HAProxy a/e, agent x, redis y'."""
    out, i = [], 1
    while f'{k}_r{i}_rps' in R:
        out.append(f"r{i}: HAProxy {R.get(f'wrk_alone_nojwt_r{i}_cpu_us', '-')}/{R.get(f'{k}_r{i}_cpu_us', '-')}, "
                   f"agent {R.get(f'{k}_r{i}_agent_us', '-')}, redis-server {R.get(f'{k}_r{i}_redis_us', '-')}")
        i += 1
    return '; '.join(out)
# issue 29: the module against the SPOE floor and against HAProxy alone, at
# both load shapes (the reported one first)
def floor_txt(sfx):
    return (f"{rtxt(f'wrk_full_nojwt_mod{sfx}', f'wrk_full_nojwt_floor{sfx}')} of the floor; "
            f"script {rtxt(f'wrk_full_nojwt{sfx}', f'wrk_full_nojwt_floor{sfx}')}; "
            f"floor {rtxt(f'wrk_full_nojwt_floor{sfx}', f'wrk_alone_nojwt{sfx}')} of HAProxy alone")
sfx2 = f'_s{shape2}' if shape2 else None
r_floor = ratio('wrk_full_nojwt_mod', 'wrk_full_nojwt_floor') if 'wrk_full_nojwt_floor_rps' in R else None
r_mod70 = ratio('wrk_full_nojwt_mod', 'wrk_alone_nojwt') if 'wrk_full_nojwt_mod_rps' in R else None
def other_shape(a, b):
    if not sfx2 or f'{a}{sfx2}_rps' not in R:
        return ''
    sh = '-t{} -c{}'.format(*shape2.split('x'))
    return f"; at {sh}: {rtxt(a + sfx2, b + sfx2)}"
f_worst = None if not f_ratio or None in f_ratio.values() else max(f_ratio.values())
r_mix = ratio('wrk_full_mixed', 'wrk_full_uniform')
r_abu = ratio('wrk_full_abuse', 'wrk_alone_abuse')
rss = num('rss_idle_kb')
mc_u, mc_a = num('mc_uniform_agent'), num('mc_abuse_agent')
mc_hu, mc_ha = num('mc_uniform_hiredis'), num('mc_abuse_hiredis')
agent_ok = None if r_b1 is None or r_b16 is None else (r_b1 >= 0.9 and r_b16 >= 0.9)
r_bmin = None if r_b1 is None or r_b16 is None else min(r_b1, r_b16)
targets = [
    ('agent path (b) >= 90% of the Redis ceiling (a) at equal concurrency',
     f"{rtxt('sb_p1', 'rb_p1')} at {c1} in flight, {rtxt('sb_p16', 'rb_p16')} at {int(c16) * 16} in flight",
     verdict(agent_ok), margin(r_bmin, 0.9)),
    ('end-to-end uniform >= 45% of HAProxy alone', rtxt('wrk_full_uniform', 'wrk_alone_uniform'),
     verdict(None if r_uni is None else r_uni >= 0.45), margin(r_uni, 0.45)),
    (f'Redis CPU per decision, redis-batch {bon} <= 0.5x of redis-batch 1',
     ', '.join(f"{'-' if r is None else f'{r:.2f}x'} at {n} in flight" for n, r in f_ratio.items()) or '-',
     verdict(None if f_worst is None else f_worst <= 0.5),
     '' if f_worst is None else f'{f_worst - 0.5:+.2f}x'),
    ('same, in instructions (i): redis-batch 32 <= 0.5x of redis-batch 1',
     '-' if i_ratio is None else f"{i_ratio:.2f}x ({R['ir_b32']} vs {R['ir_b1']} per decision)",
     verdict(None if i_ratio is None else i_ratio <= 0.5),
     '' if i_ratio is None else f'{i_ratio - 0.5:+.2f}x'),
    ('Redis module: instructions per decision at redis-batch 32 <= 0.35x the script (i)',
     '-' if m_ratio is None else f"{m_ratio:.2f}x ({R['ir_mod_b32']} vs {R['ir_b32']} per decision)",
     verdict(None if m_ratio is None else m_ratio <= 0.35),
     '' if m_ratio is None else f'{m_ratio - 0.35:+.2f}x'),
    ('end-to-end uniform without JWT >= 50% of HAProxy alone (no JWT)',
     rtxt('wrk_full_nojwt', 'wrk_alone_nojwt') + (
         f" (CPU per request: {nojwt_cpu('wrk_full_nojwt')})" if 'wrk_full_nojwt_rps' in R else ''),
     verdict(None if r_nojwt is None else r_nojwt >= 0.50), margin(r_nojwt, 0.50)),
    ('module no-JWT >= 0.45x of HAProxy alone (no JWT) in every round',
     '-' if r_mod_min is None else rtxt('wrk_full_nojwt_mod', 'wrk_alone_nojwt') +
     f", worst {pct(r_mod_min)} (CPU per request: {nojwt_cpu('wrk_full_nojwt_mod')}; "
     f"script: {rtxt('wrk_full_nojwt', 'wrk_alone_nojwt')})",
     verdict(None if r_mod_min is None else r_mod_min >= 0.45), margin(r_mod_min, 0.45)),
    (f'module no-JWT >= 0.90x the SPOE floor ({shape1})',
     '-' if r_floor is None else floor_txt('') + other_shape('wrk_full_nojwt_mod', 'wrk_full_nojwt_floor'),
     verdict(None if r_floor is None else r_floor >= 0.90), margin(r_floor, 0.90)),
    (f"module no-JWT >= 0.70x HAProxy alone (no JWT), HAProxy {R.get('haproxy')} ({shape1})",
     '-' if r_mod70 is None else rtxt('wrk_full_nojwt_mod', 'wrk_alone_nojwt')
     + other_shape('wrk_full_nojwt_mod', 'wrk_alone_nojwt'),
     verdict(None if r_mod70 is None else r_mod70 >= 0.70), margin(r_mod70, 0.70)),
    ('end-to-end mixed >= end-to-end uniform', 'mixed = ' + rtxt('wrk_full_mixed', 'wrk_full_uniform', 'of uniform'),
     verdict(None if r_mix is None else r_mix >= 1.0), margin(r_mix, 1.0)),
    ('end-to-end abuse >= 70% of HAProxy alone', rtxt('wrk_full_abuse', 'wrk_alone_abuse'),
     verdict(None if r_abu is None else r_abu >= 0.70), margin(r_abu, 0.7)),
    ('agent RSS <= 16 MB with 1,000 idle HAProxy connections',
     '-' if rss is None else f"{rss / 1024:.1f} MB ({num('rss_start_kb') / 1024:.1f} MB at start)",
     verdict(None if rss is None else rss <= 16 * 1024),
     '' if rss is None else f'{16 - rss / 1024:+.1f} MB'),
    ('Redis memory per busy 1000/1h account with precision=1m <= 2 KB',
     '-' if num('mem_1000_1h_bucket_bytes') is None else
     f"{R['mem_1000_1h_bucket_bytes']} bytes (sliding log: {R.get('mem_1000_1h_log_bytes', '-')})",
     verdict(None if num('mem_1000_1h_bucket_bytes') is None else num('mem_1000_1h_bucket_bytes') <= 2048),
     ''),
    ('no malloc per request on the hot path (agent code)',
     '-' if mc_u is None else f'{mc_u:.3f} per decision via Redis, {mc_a:.3f} per cached deny '
     f'(libhiredis: {mc_hu:.2f} and {mc_ha:.2f})',
     verdict(None if mc_u is None else (mc_u < 0.01 and mc_a < 0.01)), ''),
]

# issue 41: the self-answering shape (tools/edge-self.sh): the same no-JWT
# edges answering 201 themselves, alone / floor / script / module (and the
# module over unix sockets on both legs) back to back in each round
def self_cpu(k, alone='wrk_self_alone'):
    """CPU per request of each process of one self-answering row, its
    median round (HAProxy alone: the same round's), softirq included."""
    i = median_round(k)
    a = R.get(f'{alone}_r{i}_cpu_us', '-') if i else R.get(alone + '_cpu_us', '-')
    return (a, R.get(k + '_cpu_us', '-'), R.get(k + '_agent_us', '-'), R.get(k + '_redis_us', '-'),
            R.get(k + '_sirq_us', '-'))
SELF_ROWS = (('wrk_self_floor', 'SPOE floor (bench/spoa-floor)'), ('wrk_self_script', 'script (EVALSHA)'),
             ('wrk_self_mod', 'module (RATELIMIT.DECIDE), TCP'),
             ('wrk_self_mod_lean', 'module, lean answer (RL_IETF_ONLY), TCP'),
             ('wrk_self_mod_unix', 'module, unix sockets on both legs'))
ss = [(eng, R.get(k + '_rounds', '-'), rtxt(k, 'wrk_self_alone'),
       rtxt(k, 'wrk_self_floor') if k != 'wrk_self_floor' else '-') + self_cpu(k)
      for k, eng in SELF_ROWS if k + '_rps' in R]
if 'wrk_self_alone_rps' in R:
    ss.insert(0, ('HAProxy alone', R.get('wrk_self_alone_rounds', '-'), '1.00x', '-',
                  R.get('wrk_self_alone_cpu_us', '-'), '-', '-', '-', R.get('wrk_self_alone_sirq_us', '-')))
LEGS = [(l, desc, R.get(f'legs_{l}_agent_us', '-'), R.get(f'legs_{l}_agent_sys_us', '-'),
         R.get(f'legs_{l}_redis_us', '-'), R.get(f'legs_{l}_client_us', '-'), R.get(f'legs_{l}_sirq_us', '-'),
         R.get(f'legs_{l}_total_us', '-'), R.get(f'legs_{l}_rounds', '-'))
        for l, desc in (('tcp', 'listen 127.0.0.1, redis://127.0.0.1'), ('unix1', 'listen unix:, redis://127.0.0.1'),
                        ('unix', 'listen unix:, redis unix://')) if f'legs_{l}_total_us' in R]
LEGS_HEAD = ('(u) layout', 'agent config', 'agent µs', 'agent sys µs', 'redis-server µs', 'client µs',
             'softirq µs', 'total µs', 'totals by round')
SS_HEAD = ('self-answering, no JWT', 'req/s rounds', 'vs HAProxy alone', 'vs SPOE floor',
           'HAProxy alone µs', 'HAProxy µs', 'agent µs', 'redis-server µs', 'softirq µs')
r_self = ratio('wrk_self_mod', 'wrk_self_alone') if 'wrk_self_mod_rps' in R else None
r_self_floor = ratio('wrk_self_mod', 'wrk_self_floor') if 'wrk_self_mod_rps' in R else None
r_lean_floor = ratio('wrk_self_mod_lean', 'wrk_self_floor') if 'wrk_self_mod_lean_rps' in R else None
sirq_tcp, sirq_unix = num('wrk_self_mod_sirq_us'), num('wrk_self_mod_unix_sirq_us')
r_sirq = None if sirq_tcp is None or sirq_unix is None or not sirq_tcp else sirq_unix / sirq_tcp
hir_full, hir_lean = num('hir_full'), num('hir_lean')
r_lean = None if hir_full is None or hir_lean is None or not hir_full else hir_lean / hir_full
hap3 = R.get('haproxy', '').split('.')[0] not in ('', '1', '2')
# what the response-phase ratelimit-done line costs a request of a policy
# without inflight= (its condition, evaluated on every response)
hir_nodone = num('hir_nodone')
done_cost = (None if hir_full is None or hir_nodone is None else
             f"{hir_full - hir_nodone:+.0f} HAProxy instructions per request ({R['hir_full']} with the "
             f"ratelimit-done line, {R['hir_nodone']} without; tools/bench-haproxy-ir.sh module module+nodone)")
# what ratelimit-done costs the agent per request (tools/bench-agent-ir.sh
# module module+inflight module+done): an inflight= policy with the message
# against the same policy without it; a policy without inflight= sends none
air_shape = (R.get('air_shape', '').split() or ['4x16'])[0]
air_sfx = '_c%sd%s' % tuple(air_shape.split('x', 1)) if 'x' in air_shape else ''
air_done = num('air_done_module' + air_sfx)
agent_done_cost = (None if air_done is None else
                   f"{air_done:+.0f} agent instructions and {R.get('air_sys_done_module' + air_sfx, '-')} "
                   f"syscalls per request ({R.get('air_module+done' + air_sfx)} instructions with it, "
                   f"{R.get('air_module+inflight' + air_sfx)} without, the same inflight= policy; "
                   f"{R.get('air_module' + air_sfx)} for a policy without inflight=, which is sent none: "
                   f"the edge's rule is conditional on txn.rl.lease; module engine, spoa-bench {air_shape}, "
                   f"tools/bench-agent-ir.sh module module+inflight module+done)")
# and what sending it costs HAProxy under an inflight= policy (lease: every
# response sends it) against the same edge and agent without
hir_lease = num('hir_lease')
hap_done_cost = (None if hir_full is None or hir_lease is None else
                 f"{hir_lease - hir_full:+.0f} HAProxy instructions per request ({R['hir_lease']} under "
                 f"an inflight= policy, every response sending it, {R['hir_full']} under one without; "
                 f"tools/bench-haproxy-ir.sh module lease)")
targets41 = [
    ('module, self-answering shape, >= 0.65x HAProxy alone (self-answering)',
     '-' if r_self is None else rtxt('wrk_self_mod', 'wrk_self_alone'),
     verdict(None if r_self is None else r_self >= 0.65), margin(r_self, 0.65)),
    ('module, self-answering shape, >= 1.15x the SPOE floor',
     '-' if r_self_floor is None else rtxt('wrk_self_mod', 'wrk_self_floor'),
     verdict(None if r_self_floor is None else r_self_floor >= 1.15), margin(r_self_floor, 1.15)),
    ('  the same, the lean answer (RL_IETF_ONLY: 3 variables against the floor\'s 7)',
     '-' if r_lean_floor is None else rtxt('wrk_self_mod_lean', 'wrk_self_floor'),
     verdict(None if r_lean_floor is None else r_lean_floor >= 1.15), margin(r_lean_floor, 1.15)),
    ('softirq per request with unix sockets on both legs <= 0.5x TCP (module, self-answering)',
     ('-' if r_sirq is None else f"{r_sirq:.2f}x ({sirq_unix} vs {sirq_tcp} µs, whole machine, during wrk)")
     + ('' if 'legs_unix_total_us' not in R else
        f"; (u) per decision, unix vs TCP: softirq {R.get('legs_unix_sirq_us')} vs {R.get('legs_tcp_sirq_us')} µs, "
        f"agent + redis-server + client + softirq {R.get('legs_unix_total_us')} vs {R.get('legs_tcp_total_us')} µs"),
     verdict(None if r_sirq is None else r_sirq <= 0.5), '' if r_sirq is None else f'{r_sirq - 0.5:+.2f}x'),
    (f"lean answer: <= 0.90x the full answer's HAProxy instructions per request, HAProxy {R.get('haproxy')}",
     '-' if r_lean is None else f"{r_lean:.2f}x ({R['hir_lean']} vs {R['hir_full']}, tools/bench-haproxy-ir.sh)",
     verdict(None if r_lean is None else r_lean <= 0.90), '' if r_lean is None else f'{r_lean - 0.90:+.2f}x'),
    (f"HAProxy 3.x: module >= 1.0x the SPOE floor ({shape1}, proxied shape)",
     '-' if r_floor is None or not hap3 else rtxt('wrk_full_nojwt_mod', 'wrk_full_nojwt_floor'),
     verdict(None if r_floor is None or not hap3 else r_floor >= 1.0),
     '' if not hap3 else margin(r_floor, 1.0)),
]

# (m) Redis memory per busy account and usec_per_call, log vs precision=
mem = [(pol, R.get(f'mem_{pol.replace("/", "_")}_{m}_label'), R.get(f'mem_{pol.replace("/", "_")}_{m}_bytes'),
        R.get(f'mem_{pol.replace("/", "_")}_{m}_usec_busy'), R.get(f'mem_{pol.replace("/", "_")}_{m}_usec_wide'))
       for pol in ('10/1s', '1000/1h', '10000/24h') for m in ('log', 'bucket', 'gcra')]
mem = [r for r in mem if r[1]]
MEM_HEAD = ('(m) policy', 'storage', 'bytes/account', 'us/call busy', 'us/call 10k accounts')

# --- stdout ------------------------------------------------------------------
def table(head, rows):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    print('  ' + '  '.join(f'{h:<{w[i]}}' for i, h in enumerate(head)).rstrip())
    for r in rows:
        print('  ' + '  '.join(f'{str(c):<{w[i]}}' for i, c in enumerate(r)).rstrip())
print()
print(f"ratelimit-spoa bench, {R.get('date')}, nproc {R.get('nproc')}, {R.get('cpu')}; "
      f"median of {rounds} rounds, {R.get('secs')} s each")
print()
table(('(a)/(b)', 'in flight', 'calls/s', 'p50 us', 'p99 us', 'p99.9 us', 'ratio'),
      [r[:7] for r in ab])
print()
table(('(c) wrk -> HAProxy', 'alone req/s', 'e2e req/s', 'ratio', 'alone p50/p99 ms', 'e2e p50/p99 ms'),
      [r[:6] for r in cc])
print()
print("  (c) HAProxy CPU per request, alone / e2e (us): " + ', '.join(
      f"{s} {R.get(f'wrk_alone_{s}_cpu_us', '-')} / {R.get(f'wrk_full_{s}_cpu_us', '-')}"
      for s in ('uniform', 'mixed', 'abuse')))
for k, eng in (('wrk_full_nojwt_floor', 'SPOE floor'), ('wrk_full_nojwt', 'script'),
               ('wrk_full_nojwt_mod', 'module')):
    if k + '_rps' in R:
        print(f"  (c) no JWT, {eng}: CPU per request {nojwt_cpu(k)} (median round); by round: {nojwt_cpu_rounds(k)}")
print()
table(('(f) Redis per decision: in flight', 'redis-batch', 'decisions/s', 'Redis CPU us', 'script us',
       'decisions/call'), [r[:6] for r in ff])
print()
if ii:
    table(('(i) Redis instructions per decision: redis-batch', 'instructions', 'vs redis-batch 1'), ii)
    print()
if ig:
    table(('(i) gcra: redis-batch',) + IG_HEAD[1:], ig)
    print()
if ip:
    table(('(i) pool: redis-batch',) + IP_HEAD[1:], ip)
    print()
if cp:
    table(('(i) pool: redis-batch',) + CP_HEAD[1:], cp)
    print()
print(f"  (d) agent RSS: {R.get('rss_start_kb', '-')} kB at start, {R.get('rss_idle_kb', '-')} kB "
      f"with 1,000 idle connections")
print()
if mem:
    table(MEM_HEAD, mem)
    print()
if ss:
    table(SS_HEAD, [r[:9] for r in ss])
    print()
if LEGS:
    table(LEGS_HEAD, LEGS)
    print()
for t in targets:
    print(f'  {t[2]:7} {t[0]}: {t[1]}' + (f' ({t[3]})' if t[3] else ''))
print()
print('  issue 41 targets (medians of per-round ratios; HAProxy ' + str(R.get('haproxy')) + '):')
for t in targets41:
    print(f'  {t[2]:7} {t[0]}: {t[1]}' + (f' ({t[3]})' if t[3] else ''))
if done_cost:
    print(f'  the response line (ratelimit-done) to a policy without inflight=: {done_cost}')
if hap_done_cost:
    print(f'  the ratelimit-done message, HAProxy side, per request: {hap_done_cost}')
if agent_done_cost:
    print(f'  the ratelimit-done message, agent side, per request: {agent_done_cost}')
if R.get('errors'):
    print(f"\n  not clean: {R['errors']}")
print()

# --- plot --------------------------------------------------------------------
plotted = ''
if plot:
    def dat(name, items):
        lines = []
        for label, key in items:
            v = [num(key + s) for s in ('_rps', '_p50', '_p99')]
            if v[0]:
                lines.append(f'"{label}" {v[0]:.1f} {v[1] or 0:.1f} {v[2] or 0:.1f}')
        with open(os.path.join(tmp, name), 'w') as f:
            f.write('\n'.join(lines) + '\n')
        return len(lines)
    # labels on two lines: gnuplot turns \n in a quoted data string into a break
    plot_rows = dat('plot-spop.dat', [('Redis\\nP1', 'rb_p1'), ('agent\\nd1', 'sb_p1'),
                                      ('Redis\\nP16', 'rb_p16'), ('agent\\nd16', 'sb_p16'),
                                      ('agent\\nmixed', 'sb_mixed'), ('agent\\nabuse', 'sb_abuse')])
    plot_rows *= dat('plot-http.dat', [(f'{a}\\n{s}', f'wrk_{k}_{s}') for s in ('uniform', 'mixed', 'abuse')
                                       for a, k in (('alone', 'alone'), ('e2e', 'full'))])
    title = (f"ratelimit-spoa make bench, {R.get('date')}, nproc {R.get('nproc')}, "
             f"median of {rounds} rounds")
    cmd = ['gnuplot', '-e', f"spop='{tmp}/plot-spop.dat'; http='{tmp}/plot-http.dat'; "
           f"outfile='{plot}'; plottitle='{title}'", 'tools/bench-plot.gp']
    try:
        if not plot_rows:
            raise OSError('sections (a)/(b) or (c) were not run')
        with open(os.path.join(tmp, 'gnuplot.log'), 'w') as log:
            subprocess.run(cmd, check=True, stderr=log)
        plotted = os.path.basename(plot)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'  (no plot: {e}; see {tmp}/gnuplot.log)', file=sys.stderr)

# --- docs/benchmarks.md ------------------------------------------------------------
if not out:
    sys.exit(0)
def md(head, rows, align):
    g = ['| ' + ' | '.join(head) + ' |', '|' + '|'.join(align) + '|']
    g += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return '\n'.join(g) + '\n'
g = []
g.append(f"Latest run: `make bench` on {R.get('date')}, commit `{R.get('commit')}`. "
         f"Machine: `nproc` = {R.get('nproc')}, {R.get('cpu')}, Linux {R.get('kernel')}; "
         f"HAProxy {R.get('haproxy')}, Redis {R.get('redis')}. Every process on loopback. "
         f"Each figure is the median of {rounds} rounds of {R.get('secs')} s "
         f"(the rounds column lists all of them, sorted); each ratio is the median of the "
         f"per-round ratios (listed in brackets, in round order), the two sides of a round "
         f"having run back to back.\n")
g.append('### Targets\n')
g.append(md(('target', 'measured', 'verdict', 'margin'), targets, ('---', '---', '---', '---:')))
g.append(md(('issue 41 target', 'measured', 'verdict', 'margin'), targets41, ('---', '---', '---', '---:')))
if done_cost:
    g.append(f"The response line (`ratelimit-done`, issue 38) to a policy without `inflight=`: {done_cost}.\n")
if hap_done_cost:
    g.append(f"The `ratelimit-done` message, what sending it costs HAProxy per request: {hap_done_cost}.\n")
if agent_done_cost:
    g.append(f"The `ratelimit-done` message, what it costs the agent per request: {agent_done_cost}.\n")
missed = [t for t in targets if t[2] == 'MISSED']
unmeasured = sum(1 for t in targets if t[2] == '-')
g.append(f"Command: `{R.get('command')}`. "
         + (f"{len(missed)} target(s) missed: " + '; '.join(f'{t[0]} ({t[3] or t[1]})' for t in missed)
            + '. See "what bounds it" in "Current figures" above.' if missed else
            'All targets measured in this run were met.')
         + (f' {unmeasured} target(s) not measured in this run.' if unmeasured else '') + '\n')
if plotted:
    g.append(f'![throughput and latency]({plotted})\n')
g.append('### (a) Redis ceiling and (b) the agent path\n')
g.append(f"Policy `transfer {R.get('limit')}/1s`, keys uniform over {R.get('accounts')} accounts "
         "(all allowed) unless noted. \"In flight\" = connections x pipeline depth.\n")
g.append(md(('run', 'in flight', 'calls/s', 'p50 µs', 'p99 µs', 'p99.9 µs', 'ratio', 'rounds', 'decisions'),
            ab, ('---', '---:', '---:', '---:', '---:', '---:', '---', '---', '---')))
g.append(f"### (c) End to end: wrk -> HAProxy\n")
g.append(f"wrk {R.get('wrk_threads')} threads x {R.get('wrk_conns')} connections, `POST /transfers` "
         "with one pre-minted RS256 token per account. *Alone*: the edge config without the SPOE "
         "filter (same JWT checks, routes and headers); *e2e*: `haproxy/haproxy.cfg` + agent + Redis. "
         "Both forward allowed requests to the demo backend.\n")
g.append(md(('scenario', 'alone req/s', 'e2e req/s', 'e2e / alone', 'alone p50 / p99 ms',
             'e2e p50 / p99 ms', 'e2e statuses', 'rounds (alone vs e2e)'),
            cc, ('---', '---:', '---:', '---:', '---:', '---:', '---', '---')))
g.append(f"HAProxy {R.get('haproxy')}'s own CPU (user + system) per request, alone / e2e: " + ', '.join(
         f"{s} {R.get(f'wrk_alone_{s}_cpu_us', '-')} / {R.get(f'wrk_full_{s}_cpu_us', '-')} µs"
         for s in ('uniform', 'mixed', 'abuse')) + ".\n")
nj = [(eng, R.get(k + '_rounds', '-'), rtxt(k, 'wrk_alone_nojwt'),
       R.get(f'wrk_alone_nojwt_r{median_round(k)}_cpu_us', '-'),
       R.get(k + '_cpu_us', '-'), R.get(k + '_agent_us', '-'), R.get(k + '_redis_us', '-'),
       R.get(k + '_dpc', '-'), nojwt_cpu_rounds(k))
      for k, eng in (('wrk_full_nojwt_floor', 'SPOE floor (bench/spoa-floor)'), ('wrk_full_nojwt', 'script (EVALSHA)'),
                     ('wrk_full_nojwt_mod', 'module (RATELIMIT.DECIDE)'))
      if k + '_rps' in R]
if nj:
    g.append(f"No JWT, at {shape1}, by agent: the same edge and SPOE rules, its agent the SPOE floor "
             "(`bench/spoa-floor`: every NOTIFY answered with fixed variables, no Redis; its column "
             "*agent* is the floor program's own CPU) or the agent on `redis-engine script` or `module` "
             "(the bench's Redis loads `module/ratelimit.so`), run alone -> floor -> script -> module back "
             "to back in each round. CPU (user + system) per request served, median round, then round by round "
             "(HAProxy alone/e2e, agent, redis-server, µs); *decisions / call*: requests served / "
             "`INFO commandstats` calls of `EVALSHA`, `EVAL` and `RATELIMIT.DECIDE` in the median round (the "
             "agent's batches as the load made them):\n")
    g.append(md(('engine', 'e2e req/s rounds', 'e2e / alone', 'HAProxy alone µs', 'HAProxy e2e µs',
                 'agent µs', 'redis-server µs', 'decisions / call', 'by round'), nj,
                ('---', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---')))
if ss:
    g.append(f"Self-answering, no JWT, at {shape1}: the same no-JWT edges with each `use_backend` turned "
             "into `http-request return status 201` (`tools/edge-self.sh`), so HAProxy answers by itself "
             "with and without the limiter: what a user comparing \"HAProxy with and without the limiter\" "
             "sees first. Alone -> floor -> script -> module (-> module over unix sockets on both legs) back "
             "to back in each round; ratios are medians of the per-round ratios (rounds in brackets). CPU "
             "(user + system) per request served, median round; *softirq*: the whole machine's softirq time "
             "(`/proc/stat`) over the run / requests, mostly loopback TCP:\n")
    g.append(md(SS_HEAD, ss, ('---', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---:')))
if LEGS:
    g.append(f"### (u) The loopback legs: TCP against unix sockets\n")
    g.append(f"`tools/bench-legs.sh`: spoa-bench (playing HAProxy) -> agent (`redis-engine {R.get('legs_engine')}`) "
             f"-> Redis, `-c {R.get('legs_shape', '').replace('x', ' -d ')}`, a fixed {R.get('legs_n')} decisions "
             "per layout and round, layouts back to back in each round; CPU (user + system, and system alone for "
             "the agent) per decision of each process, and the machine's softirq time, median round by total. "
             "A loopback send's kernel work is mostly charged to the sending process's system time here, so "
             "the total is the figure to compare:\n")
    g.append(md(LEGS_HEAD, LEGS, ('---', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---')))
g.append('### (f) Redis per decision: batched vs `redis-batch 1`\n')
g.append(f"spoa-bench at {c1} x 1 and {c16} x 16 in flight, uniform over {R.get('accounts')} accounts, "
         "deny cache off (every decision reaches Redis), one agent per row. *Redis CPU*: redis-server's "
         "user + system CPU over the run / decisions; *script*: `INFO commandstats` usec of EVALSHA + "
         "EVAL / decisions (wall time inside the script, so a loaded box inflates it); "
         "*decisions/call*: decisions / script calls.\n")
g.append(md(('in flight', 'redis-batch', 'decisions/s', 'Redis CPU µs / decision', 'script µs / decision',
             'decisions / call', 'rounds'), ff, ('---:', '---:', '---:', '---:', '---:', '---:', '---')))
if ii:
    g.append('### (i) Redis instructions per decision\n')
    g.append("redis-server under callgrind, fed 10,000 decisions (after 20,000 of warm-up) on "
             "10,000 accounts at 20/1s, all admitted, by `tools/bench-redis-ir.sh`: the real script "
             "with TIME read from a clock the feed sets. Counted instructions do not drift with "
             "the box's load the way CPU time does, so this is the figure to compare between runs. "
             "redis-batch 3 is about what 16 in flight gives the agent.\n")
    g.append(md(('redis-batch', 'instructions / decision', 'vs redis-batch 1'), ii, ('---:', '---:', '---:')))
if im:
    g.append('### (i) The module against the script\n')
    g.append("The same feed as `RATELIMIT.DECIDE` calls (same keys and arguments) into a redis-server "
             "with `module/ratelimit-test.so` loaded (its test clock reads the same hash as the "
             "script's copy), by `tools/bench-redis-ir.sh`; and redis-server's own CPU per decision "
             "(user + system over a `redis-cli --pipe` feed of 200,000 decisions on 10,000 accounts, "
             "the engines alternated, median of the rounds) by `tools/bench-module-cpu.sh`.\n")
    g.append(md(('redis-batch', 'script: instructions / decision', 'module', 'module vs script'), im,
                ('---:', '---:', '---:', '---:')))
    if cm:
        g.append(md(('redis-batch', 'script: Redis CPU µs / decision', 'module', 'module vs script'), cm,
                    ('---:', '---:', '---:', '---:')))
if ig:
    g.append('### (i) GCRA against the log\n')
    g.append("The same feed, accounts and clock with the policy as `20/1s algorithm=gcra burst=20` "
             "(one string per account, `transfer:limit:g1:{ACC-n}`), by `tools/bench-redis-ir.sh`: "
             "Redis instructions per decision, each engine.\n")
    g.append(md(IG_HEAD, ig, ('---:',) * 7))
if ip or cp:
    g.append('### (i) A pooled decision against an unpooled one\n')
    g.append("The same feed, accounts and clock with every account also in one pool "
             "(`pool backend 1000000/1s headroom=100000`: its log holds a second of decisions, each "
             "decision trims what left it), by `tools/bench-redis-ir.sh` (Redis instructions per "
             "decision, each engine); and redis-server's own CPU per decision with every decision "
             "in one pool of 1,000,000/1s, by `tools/bench-module-cpu.sh`. A pool's keys are in one "
             "slot, so one Redis core decides all of that pool's decisions: 1,000,000 / its CPU µs "
             "per decision is what one pool can take on this machine.\n")
    if ip:
        g.append(md(IP_HEAD, ip, ('---:',) * 7))
    if cp:
        g.append(md(CP_HEAD, cp, ('---:',) * 7))
g.append('### (d) Memory\n')
g.append(f"Agent RSS: {R.get('rss_start_kb', '-')} kB at start, {R.get('rss_idle_kb', '-')} kB with "
         f"1,000 idle SPOP connections (the agent's own gauge: {R.get('idle_conns', '-')} open). "
         f"Peak RSS of the agent that served (b) and (c): {R.get('agent_hwm_kb', '-')} kB.\n")
if mc_u is not None:
    g.append('Allocation calls (malloc + calloc + realloc) per decision, by the object that made '
             'the call, after a warm-up:\n')
    g.append(md(('decisions', 'agent code', 'libhiredis', 'libev', 'other (libc, ...)'),
                [(label, R.get(f'mc_{k}_agent'), R.get(f'mc_{k}_hiredis'), R.get(f'mc_{k}_libev'),
                  R.get(f'mc_{k}_other'))
                 for k, label in (('uniform', 'via Redis (uniform keys)'),
                                  ('abuse', 'abuse (deny cache answers)'))],
                ('---', '---:', '---:', '---:', '---:')))
if mem:
    g.append('### (m) Redis memory per account, sliding log vs `precision=` vs GCRA\n')
    g.append('One account filled to its limit by cost-1 requests spread over its window, then '
             '`MEMORY USAGE <key> SAMPLES 0`; Redis time per decision is `INFO commandstats` '
             '`usec_per_call` of EVALSHA under redis-benchmark (busy accounts: twice their limit '
             'each; and 10,000 accounts). GCRA (`algorithm=gcra`, burst = the limit) keeps one '
             'string per account whatever the rate. `tools/bench-memory.sh` runs this part alone.\n')
    g.append(md(MEM_HEAD, mem, ('---', '---', '---:', '---:', '---:')))
if R.get('profile'):
    g.append('### (e) Where the agent spends its cycles\n')
    g.append(f"`perf record` on the agent during `spoa-bench -c {c16} -d 16` (self time by object, "
             "then by symbol for entries over 2%):\n")
    g.append('```\n' + R['profile'].strip('\n') + '\n```\n')
if R.get('errors'):
    g.append(f"Runs that were not clean: {R['errors']}\n")
gen = '\n'.join(g)

begin, end = '<!-- bench:begin -->', '<!-- bench:end -->'
try:
    doc = open(out).read()
except OSError:
    doc = ''
if begin in doc and end in doc:
    head, _, rest = doc.partition(begin)
    _, _, tail = rest.partition(end)
else:
    head = '# Benchmarks\n\n'
    tail = '\n'
with open(out, 'w') as f:
    f.write(head + begin + '\n' + gen + end + tail)
print(f'  wrote {out}' + (f' and {plot}' if plotted else ''), file=sys.stderr)
