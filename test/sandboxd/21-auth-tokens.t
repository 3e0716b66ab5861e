#!/bin/bash
# The TCP listener's bearer token (src/sandboxd/http.c, authorized and token_matches): it is
# taken from "Authorization: Bearer <token>" or, where a Kubernetes API server's pods/proxy
# consumes Authorization, from "X-Mesh-Sandboxd-Token: <token>". In both headers a token that
# is empty, shorter, a prefix of the right one, the right one extended, or the right one in
# another case is refused with 401 and the stable error code "unauthorized"; the right token is
# accepted in each; a wrong Authorization is not rescued by a right X-Mesh-Sandboxd-Token.
. "$(dirname "$0")/lib.sh"
plan 18
sd_start
# the token is long enough that half of it and all but its last character differ from it
like "$SD_TOKEN" '^tok-[0-9]{6,}$' "the daemon's token is tok- and digits"

# answer HEADER_LINE...: "STATUS CODE" of GET /v1/capabilities sent with those header lines
# (curl's "Name;" sends a header with an empty value)
answer() {
    local args=() h body
    for h in "$@"; do args+=(-H "$h"); done
    body=$(curl -s -m 10 -o "$SD_DIR/auth.body" -w '%{http_code}' "${args[@]}" "$SD_URL/v1/capabilities")
    echo "$body $(err_code "$(cat "$SD_DIR/auth.body")")"
}

len=${#SD_TOKEN}
upper=$(printf '%s' "$SD_TOKEN" | tr '[:lower:]' '[:upper:]')
declare -A bad=(
    [empty]=""
    [short]="${SD_TOKEN:0:$((len / 2))}"
    [prefix]="${SD_TOKEN:0:$((len - 1))}"
    [extended]="${SD_TOKEN}0"
    [wrong-case]="$upper"
)
# each bad token differs from the right one (else the cases below would prove nothing)
diff=0
for k in "${!bad[@]}"; do [ "${bad[$k]}" = "$SD_TOKEN" ] && diff=1; done
ok $diff "the five wrong tokens all differ from the right one"

for k in empty short prefix extended wrong-case; do
    if [ -z "${bad[$k]}" ]; then
        is "$(answer "Authorization: Bearer ")" "401 unauthorized" "Authorization: the $k bearer token is refused (401 unauthorized)"
        is "$(answer "X-Mesh-Sandboxd-Token;")" "401 unauthorized" "X-Mesh-Sandboxd-Token: the $k token is refused (401 unauthorized)"
    else
        is "$(answer "Authorization: Bearer ${bad[$k]}")" "401 unauthorized" "Authorization: the $k bearer token is refused (401 unauthorized)"
        is "$(answer "X-Mesh-Sandboxd-Token: ${bad[$k]}")" "401 unauthorized" "X-Mesh-Sandboxd-Token: the $k token is refused (401 unauthorized)"
    fi
done
is "$(answer)" "401 unauthorized" "no token at all is refused"
is "$(answer "Authorization: Bearer $SD_TOKEN")" "200 " "Authorization: Bearer with the right token is accepted"
is "$(answer "X-Mesh-Sandboxd-Token: $SD_TOKEN")" "200 " "X-Mesh-Sandboxd-Token with the right token is accepted"
is "$(answer "Authorization: Bearer ${bad[prefix]}" "X-Mesh-Sandboxd-Token: $SD_TOKEN")" "401 unauthorized" \
   "a wrong Authorization bearer token is refused even beside a right X-Mesh-Sandboxd-Token"
is "$(answer "Authorization: Basic $SD_TOKEN")" "401 unauthorized" "the right token under another scheme than Bearer is refused"
grep -q -- "${bad[prefix]}" "$SD_DIR/log"; ok $((! $?)) "no token, right or wrong, appears in the daemon's log"
finish
