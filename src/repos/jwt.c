/*-------------------------------------------------------------------------
 *
 * jwt.c
 *	  The JSON Web Token a GitHub App signs to ask for an installation
 *	  token: RS256 (RSASSA-PKCS1-v1_5 over SHA-256) with the App's private
 *	  key, signed here with libcrypto.
 *
 * GitHub's rules ("Generating a JSON Web Token (JWT) for a GitHub App"):
 * iss is the App's id, iat 60 seconds in the past against clock drift,
 * exp no more than 10 minutes after it.  The key is read from memory and
 * freed at once; nothing here logs, and an error names the step, never
 * the key.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "repos/repos.h"

/* base64url without padding (RFC 7515 §2): the JWT's encoding of each part. */
static char *
base64url(const unsigned char *in, size_t len)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char	   *out = malloc((len + 2) / 3 * 4 + 1);
	size_t		o = 0;

	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < len; i += 3)
	{
		unsigned	v = (unsigned) in[i] << 16;

		if (i + 1 < len)
			v |= (unsigned) in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		out[o++] = alphabet[(v >> 18) & 63];
		out[o++] = alphabet[(v >> 12) & 63];
		if (i + 1 < len)
			out[o++] = alphabet[(v >> 6) & 63];
		if (i + 2 < len)
			out[o++] = alphabet[v & 63];
	}
	out[o] = '\0';
	return out;
}

/* The App id goes into the claims unquoted as a number: digits only, so nothing can be injected. */
static int
app_id_valid(const char *app_id)
{
	if (app_id == NULL || *app_id == '\0' || strlen(app_id) > 20)
		return 0;
	for (const char *p = app_id; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

/*
 * Sign "header.claims" with the PEM private key; the JWT (malloc'd) or
 * NULL with ERR filled.  NOW is passed in so tests can place it in time.
 */
char *
mesh_github_app_jwt(const char *app_id, const char *private_key_pem, time_t now, char *err)
{
	static const char header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
	char		claims[128];
	char	   *h64 = NULL,
			   *c64 = NULL,
			   *s64 = NULL,
			   *signing_input = NULL,
			   *jwt = NULL;
	unsigned char *sig = NULL;
	size_t		siglen = 0;
	BIO		   *bio = NULL;
	EVP_PKEY   *key = NULL;
	EVP_MD_CTX *md = NULL;

	err[0] = '\0';
	if (!app_id_valid(app_id))
	{
		snprintf(err, MESH_REPOS_ERR_LEN, "the App id must be decimal digits");
		return NULL;
	}
	snprintf(claims, sizeof(claims), "{\"iat\":%lld,\"exp\":%lld,\"iss\":\"%s\"}",
			 (long long) (now - MESH_GITHUB_JWT_BACKDATE),
			 (long long) (now - MESH_GITHUB_JWT_BACKDATE + MESH_GITHUB_JWT_LIFETIME), app_id);

	bio = BIO_new_mem_buf(private_key_pem, -1);
	if (bio != NULL)
		key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	if (key == NULL || EVP_PKEY_base_id(key) != EVP_PKEY_RSA)
	{
		snprintf(err, MESH_REPOS_ERR_LEN, "the App private key is not an RSA key in PEM");
		goto done;
	}
	h64 = base64url((const unsigned char *) header, strlen(header));
	c64 = base64url((const unsigned char *) claims, strlen(claims));
	if (h64 == NULL || c64 == NULL)
		goto oom;
	signing_input = malloc(strlen(h64) + strlen(c64) + 2);
	if (signing_input == NULL)
		goto oom;
	sprintf(signing_input, "%s.%s", h64, c64);

	md = EVP_MD_CTX_new();
	if (md == NULL ||
		EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
		EVP_DigestSign(md, NULL, &siglen, (const unsigned char *) signing_input,
					   strlen(signing_input)) != 1 ||
		(sig = malloc(siglen)) == NULL ||
		EVP_DigestSign(md, sig, &siglen, (const unsigned char *) signing_input,
					   strlen(signing_input)) != 1)
	{
		snprintf(err, MESH_REPOS_ERR_LEN, "signing the App JWT failed");
		goto done;
	}
	s64 = base64url(sig, siglen);
	if (s64 == NULL)
		goto oom;
	jwt = malloc(strlen(signing_input) + strlen(s64) + 2);
	if (jwt == NULL)
		goto oom;
	sprintf(jwt, "%s.%s", signing_input, s64);
	goto done;

oom:
	snprintf(err, MESH_REPOS_ERR_LEN, "out of memory building the App JWT");
done:
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(key);
	BIO_free(bio);
	free(h64);
	free(c64);
	free(s64);
	free(signing_input);
	free(sig);
	return jwt;
}
