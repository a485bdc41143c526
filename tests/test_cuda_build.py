"""The CUDA runtime builds and links without a GPU (nothing here runs on one).

- every function that snrt.h and snrt_dev.h declare is defined (with C
  linkage) in build/libsnrt_cuda.a;
- a small hand-written train.c (a fake snrt_the_model whose train_step calls
  kernels of every family and the tensor-pool copies) compiles as C11 with
  -Werror and links with nvcc against build/libsnrt_cuda.a and the CUDA
  libraries that configure.py lists (`cudalibs` in build.ninja).

Skips, saying why, where nvcc or the CUDA runtime library is absent.
"""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "build", "libsnrt_cuda.a")


def find_nvcc():
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cand = shutil.which("nvcc") or os.path.join(home, "bin", "nvcc")
    return cand if os.path.exists(cand) else None


NVCC = find_nvcc()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found: no CUDA toolkit here")


def ninja_var(name):
    with open(os.path.join(ROOT, "build.ninja")) as f:
        for line in f:
            if line.startswith(name + " = "):
                return line[len(name) + 3:].strip()
    return None


def require_lib():
    if ninja_var("nvcc") is None:
        pytest.skip("configure.py found no cuDNN (build.ninja has no CUDA runtime)")
    assert os.path.exists(LIB), "build/libsnrt_cuda.a missing: run ninja"


def defined_symbols():
    out = subprocess.run(["nm", "-g", "--defined-only", LIB], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=True).stdout
    return {l.split()[-1] for l in out.splitlines() if re.match(r"^[0-9a-f]+ [TW] ", l)}


def test_every_api_function_is_defined():
    require_lib()
    decl = set()
    for h in ("runtime/snrt.h", "runtime/snrt_dev.h"):
        text = open(os.path.join(ROOT, h)).read()
        # Non-static function declarations: "type name(" at the start of a line.
        for m in re.finditer(r"^(?!static)[a-z_][a-z0-9_ ]*[ *](snrt_[a-z0-9_]+)\(", text, re.M):
            decl.add(m.group(1))
    assert len(decl) > 50, "header parse found too few functions: %d" % len(decl)
    missing = sorted(decl - defined_symbols())
    assert not missing, "declared but not defined (with C linkage) in libsnrt_cuda.a: %s" % missing


TRAIN_C = r"""
/* A fake emitted program: a few tensors in a 1 MiB arena and a step that
 * calls kernels of every family. Built, linked, never run. */
#include "snrt.h"
#include <stddef.h>

static const snrt_conv_t conv0 = {.n = 2, .c = 3, .h = 8, .w = 8, .k = 4, .oh = 8, .ow = 8,
                                  .kh = 3, .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1,
                                  .dh = 1, .dw = 1, .group = 1, .ws_images = 2,
                                  .ws_bytes = 65536};
static const snrt_bn_t bn0 = {.n = 2, .c = 4, .hw = 64, .eps = 1e-5f, .momentum = 0.9f};
static const snrt_unary_t relu0 = {.n = 512, .kind = SNRT_RELU};
static const snrt_pool_t pool0 = {.n = 2, .c = 4, .h = 8, .w = 8, .oh = 4, .ow = 4, .kh = 2,
                                  .kw = 2, .sh = 2, .sw = 2, .dh = 1, .dw = 1};
static const snrt_mm_t fc0 = {.batch = 1, .m = 2, .n = 10, .k = 64, .trans_b = 1,
                              .alpha = 1.0f, .beta = 0.0f};
static const snrt_bias_t fcb0 = {.rows = 2, .cols = 10, .kind = SNRT_BIAS_ROW, .scale = 1.0f};
static const snrt_loss_t loss0 = {.n = 2, .classes = 10};
static const snrt_dropout_t drop0 = {.n = 128, .ratio = 0.5f, .id = 1};
static const int64_t chunks[2] = {64, 64};
static const snrt_concat_t cat0 = {.parts = 2, .outer = 2, .chunk = chunks};
static const snrt_sgd_t sgd0 = {.n = 108, .momentum = 0.9f, .param = 2};

#define F(off) ((float *)(snrt_arena(c) + (off)))

static void train_step(snrt_ctx *c) {
  snrt_conv_fwd(c, &conv0, F(0), F(4096), NULL, F(8192), F(65536 * 2));
  snrt_bn_fwd_train(c, &bn0, F(8192), F(12288), F(12544), F(12800), F(13056), F(16384),
                    F(13312), F(13568));
  snrt_unary_fwd(c, &relu0, F(16384), F(16384));
  snrt_maxpool_fwd(c, &pool0, F(16384), F(20480));
  snrt_offload(c, 0, 20480, 512, 0);
  snrt_matmul(c, &fc0, F(20480), F(24576), F(32768));
  snrt_bias_fwd(c, &fcb0, F(36864), F(32768));
  snrt_softmax_ce_fwd(c, &loss0, F(32768), (const int32_t *)(snrt_arena(c) + 37120), F(37376));
  snrt_softmax_ce_bwd(c, &loss0, F(32768), (const int32_t *)(snrt_arena(c) + 37120), F(37632));
  snrt_dropout_fwd(c, &drop0, F(20480), F(40960));
  const float *parts[2] = {F(20480), F(40960)};
  snrt_concat(c, &cat0, parts, F(45056));
  snrt_wait(c, 0);
  snrt_prefetch(c, 20480, 0, 512, 1);
  snrt_wait(c, 1);
  snrt_maxpool_bwd(c, &pool0, F(16384), F(20480), F(49152));
  snrt_unary_bwd(c, &relu0, F(16384), NULL, F(49152), F(49152));
  snrt_conv_bwd_filter(c, &conv0, F(0), F(49152), F(53248), F(65536 * 2));
  snrt_conv_bwd_data(c, &conv0, F(49152), F(4096), F(57344), F(65536 * 2));
  snrt_sgd(c, &sgd0, F(4096), F(53248), F(61440));
  snrt_dead(c, 49152, 4096);
}

static const snrt_tensor tensors[] = {
  {.name = "x", .kind = SNRT_T_INPUT, .dtype = SNRT_F32, .rank = 4, .dims = {2, 3, 8, 8},
   .nbytes = 1536, .offset = 0, .host_offset = -1, .grad = -1, .opt = {-1, -1}},
  {.name = "y", .kind = SNRT_T_LABEL, .dtype = SNRT_I32, .rank = 1, .dims = {2},
   .nbytes = 8, .offset = 37120, .host_offset = -1, .grad = -1, .opt = {-1, -1}},
  {.name = "w", .kind = SNRT_T_PARAM, .dtype = SNRT_F32, .rank = 4, .dims = {4, 3, 3, 3},
   .nbytes = 432, .offset = 4096, .host_offset = -1, .init = SNRT_INIT_KAIMING, .fan_in = 27,
   .grad = 4, .opt = {5, -1}},
  {.name = "loss", .kind = SNRT_T_LOSS, .dtype = SNRT_F32, .rank = 0, .nbytes = 4,
   .offset = 37376, .host_offset = -1, .grad = -1, .opt = {-1, -1}},
  {.name = "w_grad", .kind = SNRT_T_GRAD, .dtype = SNRT_F32, .rank = 4, .dims = {4, 3, 3, 3},
   .nbytes = 432, .offset = 53248, .host_offset = -1, .grad = -1, .opt = {-1, -1}},
  {.name = "w_mom", .kind = SNRT_T_OPT, .dtype = SNRT_F32, .rank = 4, .dims = {4, 3, 3, 3},
   .nbytes = 432, .offset = 61440, .host_offset = -1, .init = SNRT_INIT_ZERO, .grad = -1,
   .opt = {-1, -1}},
};

const snrt_model snrt_the_model = {
  .name = "fake.onnx", .fingerprint = 1, .batch = 2, .arena_bytes = 1 << 20,
  .host_bytes = 4096, .ntensors = 6, .tensors = tensors, .input = 0, .label = 1,
  .loss = 3, .logits = -1, .classes = 10, .loss_kind = SNRT_LOSS_SOFTMAX_CE,
  .opt_kind = SNRT_OPT_SGD, .lr = 0.01f, .policy = "none", .train_step = train_step,
  .eval_step = train_step,
};
"""

# Stands in for runtime/common's main loop where that is not in the library
# yet: exercises the device layer's entry points.
MAIN_C = r"""
#include "snrt_dev.h"
#include <stdio.h>
int main(void) {
  snrt_ctx ctx = {.m = &snrt_the_model, .lr = 0.01f, .seed = 1};
  float loss = 0;
  snrt_dev_init(&ctx);
  printf("%s\n", snrt_dev_describe(&ctx));
  for (ctx.step = 0; ctx.step < 3; ctx.step++)
    snrt_dev_run_step(&ctx, snrt_the_model.train_step);
  snrt_dev_download(&ctx, &loss, snrt_the_model.tensors[3].offset, 4);
  snrt_dev_sync(&ctx);
  snrt_dev_free(&ctx);
  printf("loss %g\n", loss);
  return 0;
}
"""


def test_fake_program_links(tmp_path):
    require_lib()
    cflags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-I" + os.path.join(ROOT, "runtime")]
    objs = []
    srcs = [("train.c", TRAIN_C)]
    if "main" not in defined_symbols():
        srcs.append(("main.c", MAIN_C))
    for name, text in srcs:
        src = tmp_path / name
        src.write_text(text)
        obj = str(src) + ".o"
        r = subprocess.run(["gcc"] + cflags + ["-c", str(src), "-o", obj],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        objs.append(obj)
    exe = str(tmp_path / "train")
    libs = ninja_var("cudalibs").split()
    r = subprocess.run([NVCC, "-o", exe] + objs + [LIB] + libs,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    assert os.path.getsize(exe) > 0
    # The fat binary holds code for Ampere and Hopper.
    cuobjdump = os.path.join(os.path.dirname(NVCC), "cuobjdump")
    if os.path.exists(cuobjdump):
        r = subprocess.run([cuobjdump, "--list-elf", exe], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        assert "sm_90" in r.stdout and "sm_80" in r.stdout, r.stdout


# ---- every example model's emitted cuda program compiles and links ----

EXAMPLES = ["fashion_cnn", "resnet50", "alexnet", "vgg16", "resnet18", "googlenet",
            "inception_v3", "densenet121", "mobilenet_v2"]


@pytest.fixture(scope="module")
def example_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cuda_models")
    py = "/usr/bin/python3"

    def get(name):
        if name == "fashion_cnn":
            return os.path.join(ROOT, "examples", "fashion_cnn.onnx")
        path = os.path.join(str(d), name + ".onnx")
        if os.path.exists(path):
            return path
        if name == "resnet50":
            cmd = [py, os.path.join(ROOT, "examples", "make_resnet.py"), "--depth", "50",
                   "--size", "64", "-o", path]
        else:
            size = "75" if name == "inception_v3" else "64"
            cmd = [py, os.path.join(ROOT, "examples", "export_torchvision.py"), name, "--size",
                   size, "--out", str(d)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return path
    return get


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_links_for_cuda(name, example_models, tmp_path):
    """snc compile --target cuda, then the emitted build.ninja builds DIR/train
    with nvcc (link only: nothing runs). superneurons on one model so that the
    copy-engine calls are in the program too."""
    require_lib()
    model = example_models(name)
    out = str(tmp_path / "prog")
    policy = "superneurons" if name == "resnet50" else "liveness"
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile", model, "-o", out,
                        "--batch", "2", "--target", "cuda", "--policy", policy],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["ninja", "-C", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    assert os.access(os.path.join(out, "train"), os.X_OK)
    if policy == "superneurons":
        assert "snrt_prefetch" in open(os.path.join(out, "train.c")).read()


def test_gpt_example_links_for_cuda(tmp_path):
    """The byte-level GPT example (examples/gpt_bytes.onnx, opset 13:
    embeddings, LayerNorm decomposed, masked attention, exact GELU) links
    for cuda under superneurons (LayerNormalization's kernels are covered by
    test_every_api_function_is_defined)."""
    require_lib()
    out = str(tmp_path / "prog")
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile",
                        os.path.join(ROOT, "examples", "gpt_bytes.onnx"), "-o", out, "--batch", "16",
                        "--target", "cuda", "--policy", "superneurons"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["ninja", "-C", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    src = open(os.path.join(out, "train.c")).read()
    for fn in ("snrt_gather_fwd", "snrt_gather_bwd", "snrt_where", "snrt_math_fwd",
               "snrt_math_bwd"):
        assert fn + "(" in src, fn
