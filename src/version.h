/*-------------------------------------------------------------------------
 *
 * version.h
 *	  The check that the installed SQL is the version this library serves.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MESH_VERSION_H
#define MESH_VERSION_H

extern void mesh_require_sql_version(void);

#endif							/* MESH_VERSION_H */
