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
 *-------------------------------------------------------------------------
 */
#ifndef MESH_JSON_H
#define MESH_JSON_H

#define json_object pg_sql_json_object
#include "utils/fmgrprotos.h"
#undef json_object

#include <jansson.h>

#endif							/* MESH_JSON_H */
