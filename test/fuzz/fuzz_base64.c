/*
 * fuzz_base64.c - libFuzzer target for the daemon's base64 (src/sandboxd/json.c), which reads
 * exec requests' stdin_b64. Arbitrary bytes are decoded (must never overrun), and encoded and
 * decoded again (must give the same bytes back).
 */
#include "json.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Both directions on one input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = strndup((const char *)data, size);
    size_t len;
    bool ok;
    free(base64_decode(text, &len, &ok));
    free(text);

    char *encoded = base64_encode(data, size);
    unsigned char *back = base64_decode(encoded, &len, &ok);
    if (!ok || len != size || memcmp(back, data, size) != 0)
        abort();
    free(back);
    free(encoded);
    return 0;
}
