-- test/lib/catalog.sql: everything mesh_exec puts in a database, one line per fact, sorted,
-- with names instead of OIDs, so that two databases' outputs can be compared with diff
-- (test/e2e/upgrade.t: an upgraded install against a fresh one).  Run with psql -XAt.
WITH ext AS (SELECT oid, extnamespace FROM pg_extension WHERE extname = 'mesh_exec'),
members AS (   -- every object that belongs to the extension
  SELECT d.classid, d.objid FROM pg_depend d, ext WHERE d.refclassid = 'pg_extension'::regclass
     AND d.refobjid = ext.oid AND d.deptype = 'e'),
rels AS (SELECT c.* FROM pg_class c JOIN members m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid),
procs AS (SELECT p.* FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid),
facts(line) AS (
  SELECT 'member ' || pg_describe_object(classid, objid, 0) FROM members
  UNION ALL
  SELECT format('relation %s kind=%s persistence=%s options=%s rls=%s/%s acl=%s', c.oid::regclass, c.relkind,
                c.relpersistence, c.reloptions, c.relrowsecurity, c.relforcerowsecurity, c.relacl)
    FROM rels c
  UNION ALL
  SELECT format('column %s.%s #%s %s notnull=%s default=%s compression=%s identity=%s generated=%s collation=%s acl=%s',
                a.attrelid::regclass, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(ad.adbin, ad.adrelid), a.attcompression, a.attidentity, a.attgenerated,
                a.attcollation::regcollation, a.attacl)
    FROM pg_attribute a JOIN rels c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('constraint %s %s %s deferrable=%s/%s', co.conrelid::regclass, co.conname,
                pg_get_constraintdef(co.oid), co.condeferrable, co.condeferred)
    FROM pg_constraint co JOIN rels c ON c.oid = co.conrelid
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN rels c ON c.oid = i.indrelid
  UNION ALL
  SELECT format('view %s %s', c.oid::regclass, md5(pg_get_viewdef(c.oid))) FROM rels c WHERE c.relkind IN ('v', 'm')
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN rels c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal
  UNION ALL
  SELECT format('policy %s %s cmd=%s permissive=%s roles=%s using=%s check=%s', p.polrelid::regclass, p.polname,
                p.polcmd, p.polpermissive, (SELECT array_agg(r::regrole ORDER BY r::regrole::text) FROM unnest(p.polroles) r),
                pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
    FROM pg_policy p JOIN rels c ON c.oid = p.polrelid
  UNION ALL
  SELECT format('function %s returns %s lang=%s volatility=%s strict=%s secdef=%s leakproof=%s parallel=%s '
                'config=%s rows=%s cost=%s body=%s acl=%s',
                p.oid::regprocedure, pg_get_function_result(p.oid), l.lanname, p.provolatile, p.proisstrict,
                p.prosecdef, p.proleakproof, p.proparallel, p.proconfig, p.prorows, p.procost,
                md5(p.prosrc || coalesce(p.probin, '')),
                (SELECT array_agg(x::text ORDER BY x::text) FROM unnest(p.proacl) x))
    FROM procs p JOIN pg_language l ON l.oid = p.prolang
  UNION ALL
  SELECT format('function-args %s %s', p.oid::regprocedure, pg_get_function_arguments(p.oid)) FROM procs p
  UNION ALL
  SELECT format('enum %s %s', t.oid::regtype, (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder)
                                                FROM pg_enum e WHERE e.enumtypid = t.oid))
    FROM pg_type t JOIN members m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid WHERE t.typtype = 'e'
  UNION ALL
  SELECT format('schema %s owner-acl=%s', n.nspname, n.nspacl) FROM pg_namespace n
    JOIN members m ON m.classid = 'pg_namespace'::regclass AND m.objid = n.oid
  UNION ALL
  SELECT format('config-dump %s where=%s', c.relid::regclass, c.cond)
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS c(relid, cond) WHERE e.extname = 'mesh_exec'
  UNION ALL
  SELECT format('comment %s %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), md5(d.description))
    FROM pg_description d JOIN members m ON m.classid = d.classoid AND m.objid = d.objoid
  UNION ALL
  SELECT format('default-acl %s %s %s', da.defaclrole::regrole, da.defaclobjtype, da.defaclacl) FROM pg_default_acl da
)
SELECT line FROM facts ORDER BY line COLLATE "C";
