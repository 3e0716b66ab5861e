/*-------------------------------------------------------------------------
 *
 * mesh_json.h
 *	  jansson, made to coexist with PostgreSQL's headers.
 *
 * PostgreSQL declares its SQL-callable json_object() in fmgrprotos.h, and
 * jansson declares a C json_object() of its own.  Including fmgrprotos.h
 * first, with PostgreSQL's name hidden, lets both be used in one file.
 * Include this right after postgres.h in every file that uses jansson.
 *
 * The same clash exists at run time: a call from this library to
 * json_object() binds to the postgres executable's function, which wins
 * symbol lookup.  So jansson's empty-object constructor is reached through
 * json_pack() instead, which resolves inside libjansson.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_JSON_H
#define MESH_JSON_H

#define json_object pg_sql_json_object
#include "utils/fmgrprotos.h"
#undef json_object

#include <jansson.h>

/* jansson's json_object(), without the symbol the postgres binary shadows */
#define json_object() json_pack("{}")

#endif							/* MESH_JSON_H */
