/* backend/sim: the simulated GPU, a device whose memory is a budget.
 *
 * Compute is the CPU backend's (the same kernels, so logits equal cpu's bit for bit), but every
 * buffer lives in the sim's own memory space with a hard byte budget, is not host-visible
 * (host_ptr returns NULL, wrap_host is absent: weights are uploaded), and bytes cross only
 * through upload/download, which are counted and optionally throttled to a PCIe-like rate. A
 * fixed context overhead (ctx=) is reserved at open, as a CUDA context and its library
 * workspaces would be. Running the engine here is how CI tests OOM, fragmentation, offloading
 * and the planner through the same code paths the CUDA backend uses.
 * Not for: anything above backend/ (open it through backend/registry.h as "sim:SIZE").
 */
#ifndef IL_BACKEND_SIM_SIM_H
#define IL_BACKEND_SIM_SIM_H

#include "backend/cpu/cpu.h"

/* spec: "sim:SIZE[,pcie=RATE][,ctx=SIZE]". mem_limit (0 = none) lowers the budget. */
il_status il__sim_backend_new(const char *spec, const il__cpu_opts *o, size_t mem_limit, il_backend **out);

#endif
