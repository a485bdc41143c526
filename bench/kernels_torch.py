"""PyTorch CPU times for the conv shapes of bench/kernels.c (same thread count)."""
import sys
import time
import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
L = [(3, 32, 64, 7, 2, 3), (64, 8, 64, 3, 1, 1), (64, 8, 128, 3, 2, 1), (128, 4, 128, 3, 1, 1),
     (64, 8, 128, 1, 2, 0), (128, 4, 256, 3, 2, 1), (256, 2, 256, 3, 1, 1), (256, 2, 512, 3, 2, 1),
     (512, 1, 512, 3, 1, 1), (1, 28, 32, 3, 1, 1), (32, 14, 64, 3, 1, 1)]
tot = [0.0, 0.0]
print("%-26s %9s %9s" % ("layer (c,h,k,kh,s,p)", "fwd ms", "bwd ms"))
for c, h, k, kh, s, p in L:
    conv = torch.nn.Conv2d(c, k, kh, s, p, bias=False)
    x = torch.rand(n, c, h, h, requires_grad=True)
    best = [1e9, 1e9]
    for r in range(6):
        t0 = time.perf_counter()
        y = conv(x)
        t1 = time.perf_counter()
        y.backward(y.detach())
        t2 = time.perf_counter()
        if r:
            best = [min(best[0], t1 - t0), min(best[1], t2 - t1)]
    print("%-26s %9.2f %9.2f" % (",".join(map(str, (c, h, k, kh, s, p))), best[0] * 1e3, best[1] * 1e3))
    tot = [tot[0] + best[0], tot[1] + best[1]]
print("%-26s %9.2f %9.2f" % ("total", tot[0] * 1e3, tot[1] * 1e3))
