------------------------------------------------------------------------------
-- Checking out a repository (issue 31, second half): mesh_checkout clones a
-- granted repository into the run's workspace through the run's own execs,
-- git authenticating with a credential helper that asks the broker for the
-- repository token at use time (never on disk, in argv, the environment or a URL).
------------------------------------------------------------------------------

-- Where git reaches a provider's repositories: https://<host> unless set
-- (a test's loopback server speaks plain http).
ALTER TABLE mesh.repository_providers ADD COLUMN git_url text
    CHECK (git_url ~ '^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$');

-- An admin sets the clone base of a provider (NULL or omitted: https://<host>).  Its host must be the
-- provider's host: the credential helper asks the broker for the host git names, and the
-- broker offers a token only to its own host.
CREATE FUNCTION mesh.repository_provider_set_git_url(name text, git_url text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    prov mesh.repository_providers;
BEGIN
    PERFORM mesh.require_args('repository_provider_set_git_url', ARRAY['name'],
        ARRAY[repository_provider_set_git_url.name IS NULL]);
    SELECT * INTO prov FROM mesh.repository_providers p WHERE p.name = repository_provider_set_git_url.name;
    IF prov.name IS NULL THEN
        RAISE EXCEPTION 'repository provider "%" does not exist', repository_provider_set_git_url.name
            USING ERRCODE = 'undefined_object', HINT = 'Create it with mesh.repository_provider_set.';
    END IF;
    IF git_url IS NOT NULL AND substring(git_url FROM '^https?://([^/]+)') IS DISTINCT FROM prov.host THEN
        RAISE EXCEPTION 'git_url must name the provider''s host %', prov.host
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE mesh.repository_providers p SET git_url = repository_provider_set_git_url.git_url, updated_at = now()
     WHERE p.name = prov.name;
END
$$;

-- True when the workspace egress EGRESS (as mesh.workspace_egress captured it) lets the
-- sandbox reach HOST (a port is ignored): open mode, or a listed domain (exact or "*."
-- wildcard); an IP address never matches a list (the proxy refuses raw IPs there).
CREATE FUNCTION mesh.egress_allows_host(egress jsonb, host text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT egress->>'mode' = 'open'
        OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(egress->'domains', '[]')) d
                    WHERE lower(split_part(host, ':', 1)) = d
                       OR (d LIKE '*.%' AND lower(split_part(host, ':', 1)) LIKE '%' || substr(d, 2)))
$$;

-- What mesh_checkout needs, and its refusals before any backend call: the caller may drive
-- the run, the run holds a live grant for the repository, its egress reaches the host and
-- its backend (once chosen) declares shell.  Returns the clone URL and the git identity.
CREATE FUNCTION mesh.checkout_plan(p_run_id text, p_repository text,
                                   OUT clone_url text, OUT host text, OUT agent_id text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, mesh, pg_temp AS $$
DECLARE
    ws mesh.workspaces;
    prov mesh.repository_providers;
    egress jsonb;
BEGIN
    PERFORM mesh.require_args('checkout_plan', ARRAY['p_run_id', 'p_repository'],
        ARRAY[p_run_id IS NULL, p_repository IS NULL]);
    SELECT * INTO ws FROM mesh.workspaces w WHERE w.run_id = p_run_id AND w.status <> 'released';
    IF ws.run_id IS NULL OR NOT mesh.may_drive(ws.owner_role, mesh.invoking_role()) THEN
        RAISE EXCEPTION 'run "%" is unknown or released', p_run_id
            USING ERRCODE = 'undefined_object', HINT = 'Acquire it first with mesh_acquire.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM mesh.grants g WHERE g.run_id = p_run_id AND g.kind = 'repository'
                      AND g.name = p_repository AND g.revoked_at IS NULL) THEN
        RAISE EXCEPTION 'run "%" has no grant for repository "%"', p_run_id, p_repository
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An admin grants it with mesh.repository_grant(run_id, repository, permissions).';
    END IF;
    SELECT p.* INTO prov FROM mesh.repositories r JOIN mesh.repository_providers p ON p.name = r.provider
     WHERE r.repository = p_repository;
    -- the captured policy once materialized; before, what materialization would capture
    egress := coalesce(ws.egress, CASE WHEN egress_policy_saved()->>'mode' = 'open' THEN '{"mode": "open"}'::jsonb
              ELSE jsonb_build_object('mode', 'allowlist', 'domains',
                       to_jsonb(egress_default_domains()) || (egress_policy_saved()->'domains')) END);
    IF NOT egress_allows_host(egress, prov.host) THEN
        RAISE EXCEPTION 'the egress policy of run "%" does not let its sandbox reach %', p_run_id, prov.host
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An admin adds the host to the allowlist with mesh.set_egress_policy(); it applies to runs acquired afterwards.';
    END IF;
    IF ws.capabilities IS NOT NULL AND NOT coalesce((ws.capabilities->>'shell')::boolean, false) THEN
        RAISE EXCEPTION 'backend "%" cannot run git (it does not declare the shell capability)', ws.backend_kind
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Check out in a run of an agent pinned to a backend with the shell capability.';
    END IF;
    clone_url := coalesce(prov.git_url, 'https://' || prov.host) || '/' || p_repository || '.git';
    host := prov.host;
    agent_id := ws.agent_id;
END
$$;

-- The git credential helper mesh_checkout writes into the workspace: on "get" it asks the
-- broker (its unix socket, the run token in a header read from stdin, not argv) for the
-- token of the host and repository git names and answers it with the user name the broker
-- says (x-access-token for GitHub, oauth2 for GitLab); for anything the broker refuses
-- (another host, an ungranted repository) it answers nothing.
CREATE FUNCTION mesh.checkout_credential_helper() RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $helper$
    SELECT $$#!/bin/sh
# git credential helper written by mesh_checkout: the repository token from the run's broker at use time
[ "$1" = get ] || exit 0
host= path=
while IFS= read -r line && [ -n "$line" ]; do
  case $line in host=*) host=${line#host=} ;; path=*) path=${line#path=} ;; esac
done
path=${path%.git}
case $path in */*/* | /* | *..*) exit 0 ;; ?*/?*) ;; *) exit 0 ;; esac
case $host in *[!A-Za-z0-9.:-]* | '') exit 0 ;; esac
answer=$(printf 'Authorization: Bearer %s\n' "$(cat /workspace/.mesh/run-token)" |
  curl -s -m 15 --unix-socket /run/mesh/broker.sock -X POST -H @- "http://mesh/v1/repositories/$host/$path/token") || exit 0
password=$(printf %s "$answer" | sed -n 's/.*"password": *"\([^"]*\)".*/\1/p')
username=$(printf %s "$answer" | sed -n 's/.*"username": *"\([A-Za-z0-9._-]*\)".*/\1/p')
[ -n "$password" ] && [ -n "$username" ] || exit 0
printf 'username=%s\npassword=%s\n' "$username" "$password"
$$
$helper$;

-- Clones REPOSITORY into /workspace/<name> of the run (or fetches, when it is there), git
-- committing as the run's agent, on BRANCH (created from the default branch when it does
-- not exist; the default branch when NULL).  Every step is an exec of the run, recorded in
-- mesh.execs like any other; the refusals come first, before any backend call.
CREATE FUNCTION @extschema@.mesh_checkout(run_id text, repository text, branch text DEFAULT NULL,
                                          OUT commit_sha text, OUT checked_out_branch text, OUT path text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    plan record;
    helper constant text := '/workspace/.mesh/git-credential-mesh';
    env constant jsonb := '{"GIT_TERMINAL_PROMPT": "0"}';
    r record;
BEGIN
    PERFORM mesh.require_args('mesh_checkout', ARRAY['run_id', 'repository'],
        ARRAY[mesh_checkout.run_id IS NULL, mesh_checkout.repository IS NULL]);
    IF branch IS NOT NULL AND branch !~ '^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$' OR branch ~ '\.\.|//|\.lock$|/$' THEN
        RAISE EXCEPTION 'branch "%" is not a branch name this checkout accepts', branch
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Letters, digits, ".", "_", "-" and "/".';
    END IF;
    plan := mesh.checkout_plan(mesh_checkout.run_id, mesh_checkout.repository);
    path := '/workspace/' || split_part(mesh_checkout.repository, '/', 2);
    -- 1: the helper (the backend's declared capabilities are checked by the exec path first)
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id,
        ARRAY['sh', '-c', 'umask 077 && mkdir -p "${1%/*}" && cat > "$1" && chmod 700 "$1"', 'sh', helper],
        stdin => convert_to(mesh.checkout_credential_helper(), 'UTF8'));
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": writing the credential helper failed (exit %): %', repository, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception', HINT = format('mesh.execs row %s.', r.exec_id);
    END IF;
    -- 2: clone (or fetch), the helper configured in the clone, the agent's identity
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id, ARRAY['sh', '-c',
        'set -e; url=$1 dir=$2 helper=$3 name=$4
         if [ -d "$dir/.git" ]; then git -C "$dir" fetch -q origin
         else git -c credential.helper="$helper" -c credential.useHttpPath=true clone -q -- "$url" "$dir"; fi
         git -C "$dir" config credential.helper "$helper"
         git -C "$dir" config credential.useHttpPath true
         git -C "$dir" config user.name "$name"
         git -C "$dir" config user.email "$name@agents.mesh.invalid"',
        'sh', plan.clone_url, path, helper, plan.agent_id], env => env);
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": git clone failed (exit %): %', repository, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception',
                  HINT = format('mesh.execs row %s; the broker''s refusals are events of the run.', r.exec_id);
    END IF;
    -- 3: the working branch, brought up to what was fetched when it only moved forward (a
    -- clone a snapshot brought stands on the commit of its day; an agent's own commits on
    -- it are never thrown away); a new branch starts from the remote's default branch
    SELECT * INTO r FROM @extschema@.mesh_exec(mesh_checkout.run_id, ARRAY['sh', '-c',
        'set -e; cd "$1"
         default=$(git symbolic-ref -q --short refs/remotes/origin/HEAD || true)
         if [ -n "$2" ]; then
           if git rev-parse -q --verify "refs/heads/$2" >/dev/null || git rev-parse -q --verify "refs/remotes/origin/$2" >/dev/null
           then git checkout -q "$2"; else git checkout -q --no-track -b "$2" $default; fi
           upstream=origin/$2
         else
           [ -z "$default" ] || git checkout -q "${default#origin/}"
           upstream=$default
         fi
         if [ -n "$upstream" ] && git rev-parse -q --verify "refs/remotes/$upstream" >/dev/null; then
           git merge -q --ff-only "$upstream" 2>/dev/null || echo "mesh_checkout: $upstream is not a fast-forward of the branch: left as it was" >&2
         fi
         git rev-parse HEAD; git rev-parse --abbrev-ref HEAD',
        'sh', path, coalesce(branch, '')], env => env);
    IF r.exit_code IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'checkout of "%": checking out branch % failed (exit %): %', repository, branch, r.exit_code, r.stderr
            USING ERRCODE = 'external_routine_exception', HINT = format('mesh.execs row %s.', r.exec_id);
    END IF;
    commit_sha := split_part(r.stdout, E'\n', 1);
    checked_out_branch := split_part(r.stdout, E'\n', 2);
END
$$;
