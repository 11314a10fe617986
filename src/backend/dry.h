/* backend/dry: the planner's dry devices (sim:SIZE,dry and cuda:N,dry), one set of refusals.
 *
 * A dry device allocates through its real caching allocator with no memory behind the
 * addresses, so the planner sees every buffer a run would hold; nothing may read or write those
 * buffers. il_backend_dry_ops turns a backend's ops table into its dry twin: uploads are dropped
 * (only their buffers count), sync succeeds, and every op that would touch device memory
 * (download, copy, the compute ops) is refused with IL_ERR_UNSUPPORTED. Memory, capability,
 * kernel-list and allocator entries are kept.
 * Not for: sizing (the backends' allocators do that) or choosing what is dry (their spec parsers).
 */
#ifndef IL_BACKEND_DRY_H
#define IL_BACKEND_DRY_H

#include "backend/backend.h"

/* Overwrites the data-touching entries of *ops with the dry ones. Can't fail. */
void il_backend_dry_ops(il_backend_ops *ops);

#endif
