/* mesh_exec--1.0--1.1.sql: upgrade an installed mesh_exec 1.0 to 1.1 (ALTER EXTENSION mesh_exec UPDATE) */

\echo Use "ALTER EXTENSION mesh_exec UPDATE TO '1.1'" to load this file. \quit

-- Every change below is also in sql/src/ (what a fresh 1.1 install runs); test/e2e/upgrade.t
-- proves a 1.0 database updated here has the catalog of a fresh 1.1 install.
