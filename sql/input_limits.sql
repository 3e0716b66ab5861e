-- input_limits: input the kernel, an index or the filesystem would refuse
-- is refused first, by the extension, naming the argument, with an errcode
-- and a hint; nothing reaches a worker or a backend, nothing is recorded.
SELECT run_id, status FROM mesh_acquire('lim-run', 'agent-l', 'actor-l');

-- identifiers: a btree entry must fit, so 255 bytes at most
SELECT * FROM regress.try($$SELECT mesh_acquire(repeat('r', 1000000), 'a', 'b')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', repeat('a', 256), 'b')$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', 'a', repeat('b', 256))$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', 'a', 'b', parent_run_id => repeat('p', 256))$$);
SELECT * FROM regress.try($$SELECT mesh_acquire('x', 'a', 'b', environment => repeat('e', 256))$$);
SELECT * FROM regress.try($$SELECT mesh_exec(repeat('r', 256), ARRAY['true'])$$);
SELECT * FROM regress.try($$SELECT mesh_read_file(repeat('r', 256), 'x')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file(repeat('r', 256), 'x', 'y')$$);
SELECT * FROM regress.try($$SELECT mesh_release(repeat('r', 256))$$);
-- 255 bytes is still an identifier
SELECT length(run_id), status FROM mesh_acquire(repeat('r', 255), 'agent-l', 'actor-l');
SELECT mesh_release(repeat('r', 255));

-- argv and env: below the kernel's MAX_ARG_STRLEN and ARG_MAX
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY['echo', repeat('x', 10 * 1024 * 1024)])$$);
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY['echo', repeat('x', 131072)])$$);
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY['true'], env => jsonb_build_object('BIG', repeat('x', 131068)))$$);
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY(SELECT repeat('x', 100000) FROM generate_series(1, 11)))$$);
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY['true'],
    env => (SELECT jsonb_object_agg('V' || i, repeat('x', 100000)) FROM generate_series(1, 11) i))$$);

-- paths: PATH_MAX and NAME_MAX
SELECT * FROM regress.try($$SELECT mesh_read_file('lim-run', repeat('d/', 2048) || 'f')$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('lim-run', repeat('n', 300) || '.txt', 'y')$$);
SELECT * FROM regress.try($$SELECT mesh_exec('lim-run', ARRAY['true'], dir => repeat('n', 256))$$);

-- NULL where a value is required, and modes that make a file unreadable
SELECT * FROM regress.try($$SELECT mesh_write_file('lim-run', 'x', 'y', mode => NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('lim-run', 'x', 'y', mode => 0)$$);
SELECT * FROM regress.try($$SELECT mesh_write_file('lim-run', 'x', 'y', mode => 146)$$);
SELECT * FROM regress.try($$SELECT mesh_read_file('lim-run', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh_release(NULL)$$);

-- the admin functions refuse NULL the same way, naming the argument
SELECT * FROM regress.try($$SELECT mesh.backend_add(NULL, 'sandboxd', '{"socket": "/tmp/x.sock"}')$$);
SELECT * FROM regress.try($$SELECT mesh.backend_add('lim-b', 'sandboxd', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh.backend_configure('local', NULL)$$);
SELECT * FROM regress.try($$SELECT mesh.backend_enable(NULL)$$);
SELECT * FROM regress.try($$SELECT mesh.agent_set(NULL)$$);
SELECT * FROM regress.try($$SELECT mesh.run_set_budget(NULL, 10)$$);
SELECT * FROM regress.try($$SELECT mesh.grant_revoke('lim-run', NULL, 'x')$$);
SELECT config FROM mesh.backend_catalog WHERE name = 'local';

-- the largest accepted argument runs, and is what the command sees
SELECT exit_code, stdout, status FROM mesh_exec('lim-run',
    ARRAY['sh', '-c', 'printf %s "$1" | wc -c', 'sh', repeat('x', 131071)]);

-- argv and env just under the total limit run too
SELECT exit_code, stdout, status FROM mesh_exec('lim-run',
    ARRAY['sh', '-c', 'echo $#'] || ARRAY(SELECT repeat('x', 131000) FROM generate_series(1, 7)),
    env => (SELECT jsonb_object_agg('V' || i, repeat('y', 11000)) FROM generate_series(1, 10) i));

-- what the backend refuses is said in the caller's terms: no HTTP status or
-- daemon code in the message (they are in the detail)
SELECT exit_code FROM mesh_exec('lim-run', ARRAY['sh', '-c', 'echo x > locked; chmod 000 locked; mkfifo pipe']);
SELECT state, message ~ '^path "locked" is refused in the workspace of run "lim-run": ' AS names_path,
       message ~ 'HTTP|path_refused' AS leaks_protocol
  FROM regress.try($$SELECT mesh_read_file('lim-run', 'locked')$$);
SELECT state, message ~ '^path "pipe" is refused in the workspace of run "lim-run": ' AS names_path,
       message ~ 'HTTP|path_refused' AS leaks_protocol
  FROM regress.try($$SELECT mesh_read_file('lim-run', 'pipe')$$);

-- nothing above was recorded: one declared run, three execs
SELECT count(*) AS workspaces FROM mesh.workspaces WHERE length(run_id) > 255 OR run_id = 'x';
SELECT count(*) AS execs FROM mesh.execs WHERE run_id = 'lim-run';
SELECT mesh_release('lim-run');
