/*
 * resp_cmd - a Redis command written as RESP, the way hiredis would format
 * it, into the caller's buffer: "*<argc>\r\n" then "$<len>\r\n<arg>\r\n" for
 * each argument, any bytes in an argument. No I/O, no allocation.
 *
 * Why not hiredis's own redisAsyncCommandArgv(): it formats through sds
 * strings (an allocation and a growth per argument, its generic number
 * formatting), a sixth of the agent's instructions per decision. The
 * limiter writes each decision's command (RATELIMIT.DECIDE or EVALSHA, one
 * decision or a batch) with resp_cmd_write() into a buffer it owns and
 * hands the bytes to redisAsyncFormattedCommand() (hiredis 0.14 and 1.x).
 */
#ifndef SPOA_RESP_CMD_H
#define SPOA_RESP_CMD_H

#include <stddef.h>

/* Bytes the command of <argc> arguments of lengths <argvlen> takes, or 0
 * when that is more than RESP_CMD_MAX. */
size_t resp_cmd_size(size_t argc, const size_t *argvlen);

/* Commands above this many bytes are refused (the return value of
 * resp_cmd_write() must hold the size). */
#define RESP_CMD_MAX ((size_t)1 << 30)

/*
 * Write the command of <argc> arguments <argv>/<argvlen> (borrowed; an
 * argument of length 0 may be NULL) into <dst>/<cap>. Returns the bytes
 * written, or -1 when <cap> is too small or the command is over
 * RESP_CMD_MAX; then <dst> holds no command (bytes before <cap> may have
 * been written, never one at or after it). No NUL is added.
 */
long resp_cmd_write(char *dst, size_t cap, size_t argc, const char *const *argv,
                    const size_t *argvlen);

#endif /* SPOA_RESP_CMD_H */
