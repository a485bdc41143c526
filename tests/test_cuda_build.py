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
    # The fat binary holds code for every architecture configure listed (sm_75 on).
    cuobjdump = os.path.join(os.path.dirname(NVCC), "cuobjdump")
    if os.path.exists(cuobjdump):
        r = subprocess.run([cuobjdump, "--list-elf", exe], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        archs = ninja_var("cuda_archs").split()
        assert "sm_75" in archs and "sm_80" in archs and "sm_90" in archs, archs
        for a in archs:
            assert a in r.stdout, (a, r.stdout)


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


# ---- the emitted program links with what configure.py found ----

def load_configure():
    import importlib.util
    spec = importlib.util.spec_from_file_location("snc_configure", os.path.join(ROOT, "configure.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_emitted_link_line_uses_configured_libraries(tmp_path):
    """cuDNN/cuBLAS from CUDNN_HOME/CUBLAS_HOME (as PyTorch's pip wheels lay
    them out: include/ and lib/), with rpaths: configure.py writes
    build/snrt_cuda.ninja, snc compile copies it into DIR/build.ninja, and
    the program linked from it finds cuDNN in CUDNN_HOME at run time (ldd),
    without LD_LIBRARY_PATH. The fake installation is symlinks to the real
    libraries; the fake root is the repository with that build/ file."""
    require_lib()
    cuda_home = os.path.dirname(os.path.dirname(os.path.realpath(NVCC)))
    real = os.path.join(cuda_home, "lib64")
    wheel = tmp_path / "nvidia" / "cudnn"
    (wheel / "lib").mkdir(parents=True)
    (wheel / "include").mkdir()
    for f in os.listdir(real):
        if f.startswith("libcudnn"):
            os.symlink(os.path.join(real, f), str(wheel / "lib" / f))
    os.symlink(os.path.join(cuda_home, "include", "cudnn.h"), str(wheel / "include" / "cudnn.h"))
    conf = load_configure()
    inc, libs = conf.cuda_link_flags(cuda_home, {"CUDNN_HOME": str(wheel)})
    assert inc.strip() == "-I%s/include" % wheel
    # The real build's fragment is what configure computes for its environment.
    frag = open(os.path.join(ROOT, "build", "snrt_cuda.ninja")).read()
    _, here = conf.cuda_link_flags(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    assert "cudalibs = %s\n" % here in frag
    # A root whose build/ holds the fragment for the wheel layout.
    root = tmp_path / "root"
    (root / "build").mkdir(parents=True)
    os.symlink(os.path.join(ROOT, "runtime"), str(root / "runtime"))
    os.symlink(LIB, str(root / "build" / "libsnrt_cuda.a"))
    (root / "build" / "snrt_cuda.ninja").write_text("nvcc = %s\ncudalibs = %s\n" % (NVCC, libs))
    out = str(tmp_path / "prog")
    env = dict(os.environ, SNC_ROOT=str(root))
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile",
                        os.path.join(ROOT, "examples", "fashion_cnn.onnx"), "-o", out, "--batch",
                        "2", "--target", "cuda", "--policy", "liveness"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    ninja = open(os.path.join(out, "build.ninja")).read()
    assert "-L%s/lib -Xlinker -rpath=%s/lib" % (wheel, wheel) in ninja, ninja
    assert "/usr/local/cuda\n" not in ninja
    r = subprocess.run(["ninja", "-C", out], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    exe = os.path.join(out, "train")
    dyn = subprocess.run(["readelf", "-d", exe], stdout=subprocess.PIPE, text=True).stdout
    assert "%s/lib" % wheel in dyn, dyn
    ldd = subprocess.run(["ldd", exe], env=env, stdout=subprocess.PIPE, text=True).stdout
    line = [l for l in ldd.splitlines() if "libcudnn.so" in l]
    assert line and str(wheel / "lib") in line[0], ldd


def test_emitted_program_without_cuda_runtime_fails_clearly(tmp_path):
    """No build/snrt_cuda.ninja (configure found no nvcc/cuDNN): snc warns,
    and ninja -C DIR stops with a one-line reason."""
    root = tmp_path / "root"
    (root / "build").mkdir(parents=True)
    os.symlink(os.path.join(ROOT, "runtime"), str(root / "runtime"))
    out = str(tmp_path / "prog")
    env = dict(os.environ, SNC_ROOT=str(root))
    r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile",
                        os.path.join(ROOT, "examples", "fashion_cnn.onnx"), "-o", out, "--batch",
                        "2", "--target", "cuda", "--policy", "liveness"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0 and "snc: warning:" in r.stderr and "snrt_cuda.ninja" in r.stderr
    r = subprocess.run(["ninja", "-C", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode != 0 and "no CUDA runtime was built" in r.stdout


# ---- Adam: one formula for both targets (runtime/snrt_adam.h) ----

ADAM_MAIN = r"""
#include "snrt_adam.h"
#include <stdio.h>
#include <string.h>
static unsigned bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
int main(void) {
  const float lrs[3] = {1e-3f, 0.1f, 3e-4f};
  for (int dec = 0; dec < 2; dec++)
    for (int l = 0; l < 3; l++)
      for (long long step = 0; step < 3000; step += 7) {
        snrt_adam_t p = {.n = 1, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = dec ? 0.01f : 0.0005f, .decoupled = dec};
        snrt_adam_coef k = snrt_adam_coefs(&p, lrs[l], step);
        float w = 0.3f + (float)step * 1e-4f, m = 1e-3f, v = 2e-6f;
        snrt_adam_elem(p.beta1, p.beta2, p.eps, k, &w, -0.02f + (float)l * 0.01f, &m, &v);
        printf("%08x %08x %08x %08x %08x %08x %08x\n", bits(k.step_size), bits(k.bc2),
               bits(k.decay), bits(k.gwd), bits(w), bits(m), bits(v));
      }
  return 0;
}
"""


def test_adam_formula_same_in_c_and_cuda_host(tmp_path):
    """The CPU runtime compiles snrt_adam.h as C11 (gcc), the CUDA runtime as
    C++ through nvcc (the per-step coefficients are computed on the host
    there): the same bits for every step, learning rate and decay mode."""
    require_lib()
    src_c, src_cu = tmp_path / "a.c", tmp_path / "a.cu"
    src_c.write_text(ADAM_MAIN)
    src_cu.write_text(ADAM_MAIN)
    inc = "-I" + os.path.join(ROOT, "runtime")
    outs = []
    for cmd, exe in ((["gcc", "-std=c11", "-O3", "-mavx2", "-mfma", inc, str(src_c), "-lm"], "c"),
                     ([NVCC, "-O3", "-fmad=false", inc, str(src_cu)], "cu")):
        path = str(tmp_path / exe)
        r = subprocess.run(cmd + ["-o", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        assert r.returncode == 0, r.stdout
        outs.append(subprocess.run([path], stdout=subprocess.PIPE, text=True, check=True).stdout)
    assert len(outs[0].splitlines()) > 2000
    assert outs[0] == outs[1]


def test_adam_kernel_rounds_each_operation(tmp_path):
    """The Adam kernel's PTX (compute_90, the build's flags) has no fused
    multiply-add and uses IEEE division and square root: each operation is
    rounded as in the CPU's C11 code (which gcc does not contract)."""
    require_lib()
    flags = ninja_var("nvccflags")
    flags = re.sub(r"-gencode \S+", "", flags).replace("$builddir", os.path.join(ROOT, "build"))
    flags = flags.replace("-Werror=all-warnings", "")
    out = str(tmp_path / "loss.ptx")
    r = subprocess.run([NVCC] + flags.split() + ["-arch=compute_90", "-ptx",
                                                 os.path.join(ROOT, "runtime", "cuda", "loss.cu"),
                                                 "-o", out],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    ptx = open(out).read()
    m = re.search(r"\.entry (_Z6k_adam\w*)\((.*?)\n\}\n", ptx, re.S)
    assert m, "k_adam not found in the PTX"
    body = m.group(2)
    assert "fma.rn.f32" not in body
    assert "div.rn.f32" in body and "sqrt.rn.f32" in body
    assert "mul.rn.f32" in body or "mul.f32" in body


def test_gpt_example_links_for_cuda(tmp_path):
    """The byte-level GPT example (examples/gpt_bytes.onnx, opset 13:
    embeddings, LayerNorm decomposed (fused into LAYERNORM), masked
    attention, exact GELU (one fused step)) links for cuda under
    superneurons."""
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
    # (its GELU erf chain is one fused step; its LayerNorms LAYERNORM steps;
    # its causal mask the Softmax's own, and its loss the chunked LM head)
    for fn in ("snrt_gather_fwd", "snrt_gather_bwd", "snrt_softmax_fwd", "snrt_softmax_bwd",
               "snrt_fused_fwd", "snrt_fused_bwd", "snrt_ln_fwd", "snrt_ln_bwd", "snrt_lmce"):
        assert fn + "(" in src, fn
    assert "snrt_where(" not in src and ".fill = P" in src


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16bit_programs_link_for_cuda(precision, tmp_path):
    """--precision bf16|fp16 --target cuda: convolutions and GEMMs go to the
    tensor-core entry points (cuDNN on 16-bit tensors, cublasGemmEx), their
    float32 operands (weights, the data input) through 16-bit copies in the
    step's planned workspace, never through float32 copies; the other steps
    keep float32 copies (snrt_bf16_load). fp16's loss scaling is on the
    device: no host-side branch around the updates. The emitted train.c
    compiles with -Wall -Wextra -Werror and links with nvcc (it has never run
    on a GPU here)."""
    require_lib()
    fmt = "bf16" if precision == "bf16" else "f16"
    for model, batch in (("fashion_cnn", 8), ("gpt_bytes", 4)):
        out = str(tmp_path / model)
        r = subprocess.run([os.path.join(ROOT, "build", "snc"), "compile",
                            os.path.join(ROOT, "examples", model + ".onnx"), "-o", out, "--batch",
                            str(batch), "--target", "cuda", "--precision", precision],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0, r.stderr
        r = subprocess.run(["gcc", "-std=c11", "-O0", "-Wall", "-Wextra", "-Werror",
                            "-Wno-unused-parameter", "-I" + os.path.join(ROOT, "runtime"), "-c",
                            os.path.join(out, "train.c"), "-o", os.path.join(out, "check.o")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout[-3000:]
        r = subprocess.run(["ninja", "-C", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        assert r.returncode == 0, r.stdout[-3000:]
        src = open(os.path.join(out, "train.c")).read()
        assert "snrt_matmul16(" in src and "snrt_matmul(" not in src
        if model == "fashion_cnn":
            for fn in ("snrt_conv_fwd16(", "snrt_conv_bwd_data16(", "snrt_conv_bwd_filter16(",
                       "snrt_bias_fwd16("):
                assert fn in src, fn
            assert "snrt_conv_fwd(" not in src
        assert "snrt_%s_load(" % fmt in src   # the other steps' float32 copies
        assert "snrt_overflow" not in src
        if precision == "fp16":
            assert "snrt_grad_unscale(" in src and "snrt_loss_scale(" in src
