/*-------------------------------------------------------------------------
 *
 * dispatch_penalty.c
 *		The keys of a policy's parts stored beside a key's own state (its
 *		other limits', its penalty box's) and the request of the penalty
 *		box, for the dispatcher (dispatch.c decides with the box), the
 *		policies' limits (policy_limit.c) and resets (dispatch_admin.c).
 *
 * No shared state; nothing allocated.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "dispatch_penalty.h"

/*
 * The stored key of a part of req's policy kept beside the key's own
 * state (req->key: the policy's name, a NUL, the key): the policy's name
 * and a NUL, a second NUL, then for one of the policy's other limits its
 * name and a NUL (name NULL: nothing, for the penalty box), then the key.
 * Text has no NUL, so no call's key is spelt so, and the parts' keys
 * differ from each other (rl_keys lists them with their key_bytes
 * starting with a NUL).  Written into buf (RL_MAX_STORED_KEY bytes);
 * returns its length.
 */
int
rl_policy_part_key(const RlRequest *req, const char *name, char *buf)
{
	int			namelen = strlen(req->policy);
	int			len = namelen + 2;

	memcpy(buf, req->key, namelen + 1);
	buf[namelen + 1] = '\0';
	if (name != NULL)
	{
		memcpy(buf + len, name, strlen(name) + 1);
		len += strlen(name) + 1;
	}
	memcpy(buf + len, req->key + namelen + 1, req->keylen - namelen - 1);
	return len + req->keylen - namelen - 1;
}

/*
 * A policy's penalty box (block_duration): after a denial, its key is
 * denied for that long.  The box is a state of its own beside the key's,
 * kept by the same engine: a token bucket of one token refilled over
 * block_duration, under the key rl_policy_part_key gives it.  A denial
 * takes the token; while the bucket is not full again, the key is in the
 * box.  Decisions of the box are not counted and never refunded.  buf
 * holds RL_MAX_STORED_KEY bytes.
 */
void
rl_penalty_request(const RlRequest *req, int64 cost, char *buf,
				   RlRequest *box)
{
	rl_request_init(box);
	box->algo = RL_TOKEN_BUCKET;
	box->dbid = req->dbid;
	box->keylen = rl_policy_part_key(req, NULL, buf);
	box->key = buf;
	box->policy = buf;
	box->params.limit = 1;
	box->params.burst = 1;
	box->params.per = req->block_duration;
	box->params.cost = cost;
	box->at = req->at;
	box->backend = req->backend;
	box->fail_mode = req->fail_mode;
}
