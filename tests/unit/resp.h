/*
 * resp.h - canned Redis replies for unit tests: RESP text through hiredis's
 * own reader, so the code under test sees exactly what hiredis hands it.
 */
#ifndef TESTS_UNIT_RESP_H
#define TESTS_UNIT_RESP_H

#include <string.h>

#include <hiredis/hiredis.h>

/* Parse one reply from the RESP text <resp>. Caller owns the result:
 * freeReplyObject(). Fails the test on malformed text. */
static inline redisReply *resp_parse(const char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *reply = NULL;

	assert_non_null(rd);
	assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
	assert_non_null(reply);
	redisReaderFree(rd);
	return reply;
}

#endif /* TESTS_UNIT_RESP_H */
