/*-------------------------------------------------------------------------
 *
 * credentials.c
 *	  Per-run tokens, and keeping delivered secrets out of what is stored.
 *
 * A run token is 32 random bytes, handed to the workspace once (a mode 0600
 * file, written through the backend's file call: a request body, never a
 * URL) and kept in the database only as its SHA-256.  The broker hashes
 * what a sandbox presents and looks the hash up.
 *
 * Secrets delivered as environment variables would otherwise come back in
 * a command's output (`env`, a verbose tool): the worker redacts their
 * values from stdout and stderr before either is stored or returned.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mesh_json.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "utils/resowner.h"

#include "credentials.h"

static char *
hex_of(const uint8 *bytes, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	char	   *out = palloc(len * 2 + 1);

	for (size_t i = 0; i < len; i++)
	{
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[len * 2] = '\0';
	return out;
}

/*
 * SHA-256 of a token, hex: the only form in which the database knows it.
 * The hash context is tracked by a resource owner, which a background
 * worker between transactions does not have: lend it one of its own.
 */
char *
mesh_token_hash_hex(const char *token)
{
	static ResourceOwner hashing_owner = NULL;
	ResourceOwner saved = CurrentResourceOwner;
	pg_cryptohash_ctx *ctx;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	bool		ok;

	if (saved == NULL && hashing_owner == NULL)
		hashing_owner = ResourceOwnerCreate(NULL, "mesh token hashing");
	if (saved == NULL)
		CurrentResourceOwner = hashing_owner;
	ctx = pg_cryptohash_create(PG_SHA256);
	ok = ctx != NULL &&
		pg_cryptohash_init(ctx) == 0 &&
		pg_cryptohash_update(ctx, (const uint8 *) token, strlen(token)) == 0 &&
		pg_cryptohash_final(ctx, digest, sizeof(digest)) == 0;
	if (ctx)
		pg_cryptohash_free(ctx);
	CurrentResourceOwner = saved;
	if (!ok)
		elog(ERROR, "mesh: could not hash a run token");
	return hex_of(digest, sizeof(digest));
}

/* A new run token; *hash_hex receives what the database may keep. */
char *
mesh_token_new(char **hash_hex)
{
	uint8		raw[32];
	char	   *token;

	if (!pg_strong_random(raw, sizeof(raw)))
		elog(ERROR, "mesh: no strong randomness for a run token");
	token = hex_of(raw, sizeof(raw));
	explicit_bzero(raw, sizeof(raw));
	*hash_hex = mesh_token_hash_hex(token);
	return token;
}

/* Replace every occurrence of secret in data with a visible label. */
void
mesh_redact(char **data, size_t *len, const char *secret, const char *label)
{
	size_t		slen = strlen(secret);
	StringInfoData out;
	size_t		i = 0;
	bool		found = false;

	if (slen < 4 || *len < slen)
		return;					/* too short to redact without mangling output */
	if (memmem(*data, *len, secret, slen) == NULL)
		return;					/* no copy of output that does not hold it */
	initStringInfo(&out);
	while (i < *len)
	{
		if (i + slen <= *len && memcmp(*data + i, secret, slen) == 0)
		{
			appendStringInfo(&out, "[redacted %s]", label);
			i += slen;
			found = true;
		}
		else
			appendStringInfoChar(&out, (*data)[i++]);
	}
	if (!found)
	{
		pfree(out.data);
		return;
	}
	*data = out.data;
	*len = out.len;
}

/* Redact secret from every string inside a jansson value, in place. */
static void
redact_json_value(json_t *value, const char *secret, const char *label)
{
	const char *key;
	json_t	   *item;
	size_t		i;

	if (json_is_string(value))
	{
		char	   *text = pstrdup(json_string_value(value));
		size_t		len = strlen(text);

		mesh_redact(&text, &len, secret, label);
		json_string_set(value, text);
	}
	else if (json_is_object(value))
		json_object_foreach(value, key, item)
			redact_json_value(item, secret, label);
	else if (json_is_array(value))
		json_array_foreach(value, i, item)
			redact_json_value(item, secret, label);
}

/*
 * Redact secret from every string of a JSON document given as text, e.g.
 * the egress denials a backend reports (a host name can carry a value).
 * The document is parsed, so a value is found however JSON escaped it.
 * Returns the redacted text, or json_text itself when it is not JSON.
 */
char *
mesh_redact_json(char *json_text, const char *secret, const char *label)
{
	json_t	   *doc = json_loads(json_text, JSON_DECODE_ANY, NULL);
	char	   *dumped;
	char	   *result;

	if (doc == NULL)
		return json_text;
	redact_json_value(doc, secret, label);
	dumped = json_dumps(doc, JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(doc);
	result = pstrdup(dumped);
	free(dumped);
	return result;
}

/* Wipe a secret from memory before its buffer is freed. */
void
mesh_forget(char *secret)
{
	if (secret)
		explicit_bzero(secret, strlen(secret));
}
