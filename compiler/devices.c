/* devices.c — device profiles for the cost model and the default budget.
 *
 * The numbers are datasheet peaks (FP32 FLOP/s, memory bandwidth, PCIe/host
 * link bandwidth one way, memory as the driver reports it), the reserve (device
 * memory a CUDA program needs outside its arena: context, cuDNN/cuBLAS and
 * their lazily loaded kernels; an estimate until a GPU run measures it, which
 * the program prints at start-up) and the compute capability (sm; below 75,
 * CUDA 13 builds nothing for it: planning only) and the host memory one
 * GPU's process can pin for offloaded tensors (host_bytes: a server of that
 * generation's RAM per GPU: 64 GiB for a K40c/Titan Xp workstation and a
 * DGX-1 (512 GiB, 8 V100), 128 GiB for a DGX A100 (1 TiB, 8 GPUs), 256 GiB
 * for a DGX H100/H200 (2 TiB, 8 GPUs); 0 for cpu: this machine's memory,
 * read when planning). They mirror
 * schemas/devices.json, the data file users read; tests/test_plan.py fails
 * when the two disagree. Peaks, not measurements: the cost model ranks plans,
 * it does not promise seconds. */
#include "snc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const DeviceProfile device_profiles[] = {
    /* name        FLOP/s    mem B/s   link B/s  memory bytes    reserve bytes  sm  host bytes */
    {"k40c",     4.29e12, 288e9,    12e9, 12884901888LL,  1073741824LL, 35, 68719476736LL},  // 12 GiB (K40c)
    {"titan-xp", 12.1e12, 547.7e9,  12e9, 12884901888LL,  1073741824LL, 61, 68719476736LL},  // 12 GiB
    {"v100",     15.7e12, 900e9,    12e9, 34359738368LL,  1073741824LL, 70, 68719476736LL},  // 32 GiB (V100 32 GB)
    {"a100",     19.5e12, 2039e9,   25e9, 85899345920LL,  1610612736LL, 80, 137438953472LL},  // 80 GiB (A100 80 GB)
    {"h100",     67e12,   3350e9,   50e9, 85899345920LL,  2147483648LL, 90, 274877906944LL},  // 80 GiB (H100 SXM)
    {"h200",     67e12,   4800e9,   50e9, 150754820096LL, 2147483648LL, 90, 274877906944LL},  // 143771 MiB
    {"cpu",      1e11,    20e9,     10e9, 68719476736LL,  0LL,          0, 0LL},  // the CPU target's emulated arena
};
const int device_profile_count = sizeof device_profiles / sizeof device_profiles[0];

const DeviceProfile *device_find(const char *name) {
  for (int i = 0; i < device_profile_count; i++)
    if (strcmp(device_profiles[i].name, name) == 0) return &device_profiles[i];
  char known[256] = "";
  for (int i = 0; i < device_profile_count; i++) {
    strncat(known, i ? " " : "", sizeof known - strlen(known) - 1);
    strncat(known, device_profiles[i].name, sizeof known - strlen(known) - 1);
  }
  fprintf(stderr, "snc: error: unknown device profile '%s' (known: %s)\n", name, known);
  exit(EXIT_USAGE);
}

int64_t device_budget(const DeviceProfile *d) { return d->mem_bytes - d->reserve_bytes; }

int64_t device_host_budget(const DeviceProfile *d) {
  if (d->host_bytes) return d->host_bytes;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : (int64_t)64 << 30;
}
