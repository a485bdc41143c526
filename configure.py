#!/usr/bin/env python3
"""configure.py — writes build.ninja for snc (Python standard library only).

    ./configure.py [--install-deps] [--install-test-deps] [--cuda auto|on|off]
                   [--sanitize address,undefined] [--werror] [--builddir DIR]
                   [--cuda-arch 90[,100...]]

Sources are found by listing the folders (compiler/*.c, compiler/STAGE/*.c,
runtime/cpu/*.c,
runtime/cuda/*.cu, tests/unit/*.c); build.ninja re-runs this script when
configure.py changes or a file is added to one of those folders.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))

# Debian packages. Building and the main jobs need DEPS (fortunes: the text of
# `ninja demo-gpt`; Open MPI: programs compiled with --dist mpi); the tests
# add TEST_DEPS.
DEPS = ["gcc", "ninja-build", "protobuf-c-compiler", "libprotobuf-c-dev",
        "libopenblas-dev", "zlib1g-dev", "dataset-fashion-mnist", "python3", "fortunes",
        "openmpi-bin", "libopenmpi-dev", "libdnnl-dev"]
# clang + libclang-rt-14-dev: the compiler fuzzer (tests/fuzz/, libFuzzer);
# python3-pytest-xdist: `ninja test` runs the test files on every core.
TEST_DEPS = ["python3-torch", "python3-torchvision", "python3-onnx", "python3-numpy",
             "python3-pytest", "python3-pytest-xdist", "python3-pil", "chromium", "clang",
             "libclang-rt-14-dev", "python3-venv"]
# tests/test_hf_models.py and the ONNX node suite: a virtual environment over
# Debian's torch (--system-site-packages) with these from PyPI: transformers
# 4.38.2 builds and exports the tested models on torch 1.13 (Debian's);
# onnx 1.23.2 defines opset 28 and ships the node suite; numpy stays below 2
# for Debian's torch.
VENV = "build/venv"
VENV_PIP = ["transformers==4.38.2", "onnx==1.23.2", "onnxruntime==1.32.0", "numpy==1.26.4"]


# The compiler's stages, in the pipeline's order (compiler/README.md); each
# folder's .c files are part of snc.
COMPILER_STAGES = ["compiler/front", "compiler/train", "compiler/plan", "compiler/review",
                   "compiler/emit"]


def missing_packages(pkgs):
    missing = []
    for p in pkgs:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(p)
    return missing


def install(pkgs):
    """apt-get install what is missing; quiet and quick when nothing is."""
    missing = missing_packages(pkgs)
    if not missing:
        return
    print("configure: installing " + " ".join(missing), flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
                   + missing, check=True, env=env, stdout=subprocess.DEVNULL)


def install_venv():
    """build/venv with VENV_PIP; quiet, and nothing to do when its stamp
    (the pinned list) matches."""
    stamp = os.path.join(ROOT, VENV, "snc-pinned.txt")
    want = "\n".join(VENV_PIP) + "\n"
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    print("configure: making %s (pip: %s)" % (VENV, " ".join(VENV_PIP)), flush=True)
    py = os.path.join(ROOT, VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages",
                        os.path.join(ROOT, VENV)], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + VENV_PIP,
                   check=True)
    with open(stamp, "w") as f:
        f.write(want)


class Writer:
    """A small ninja file writer."""

    def __init__(self, path):
        self.f = open(path, "w")

    def comment(self, text):
        self.f.write("# " + text + "\n")

    def variable(self, key, value):
        self.f.write("%s = %s\n" % (key, value))

    def rule(self, name, command, description=None, depfile=None, generator=False,
             pool=None, restat=False):
        self.f.write("rule %s\n  command = %s\n" % (name, command))
        if description:
            self.f.write("  description = %s\n" % description)
        if depfile:
            self.f.write("  depfile = %s\n  deps = gcc\n" % depfile)
        if generator:
            self.f.write("  generator = 1\n")
        if pool:
            self.f.write("  pool = %s\n" % pool)
        if restat:
            self.f.write("  restat = 1\n")

    def build(self, outputs, rule, inputs=(), implicit=(), order_only=(), variables=None):
        outputs = [outputs] if isinstance(outputs, str) else outputs
        inputs = [inputs] if isinstance(inputs, str) else inputs
        line = "build %s: %s" % (" ".join(outputs), rule)
        if inputs:
            line += " " + " ".join(inputs)
        if implicit:
            line += " | " + " ".join(implicit)
        if order_only:
            line += " || " + " ".join(order_only)
        self.f.write(line + "\n")
        for k, v in (variables or {}).items():
            self.f.write("  %s = %s\n" % (k, v))
        return outputs

    def default(self, targets):
        self.f.write("default %s\n" % " ".join(targets))

    def close(self):
        self.f.close()


def listdir(folder, ext):
    d = os.path.join(ROOT, folder)
    if not os.path.isdir(d):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(d) if f.endswith(ext))


def probe_cuda(mode):
    """Returns (nvcc, cuda_home) or (None, None) with a warning."""
    if mode == "off":
        return None, None
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or (os.path.join(home, "bin", "nvcc")
                                   if os.path.exists(os.path.join(home, "bin", "nvcc")) else None)
    # cuDNN/cuBLAS may live outside the toolkit (PyTorch's pip wheels):
    # CUDNN_HOME / CUBLAS_HOME name folders with include/ and lib/.
    cudnn_home = os.environ.get("CUDNN_HOME", home)
    cudnn = os.path.exists(os.path.join(cudnn_home, "include", "cudnn.h"))
    if nvcc and cudnn:
        return nvcc, home
    why = "nvcc not found" if not nvcc else "cudnn.h not found under %s/include" % cudnn_home
    if mode == "on":
        sys.exit("configure: error: --cuda on, but %s" % why)
    print("configure: warning: %s; skipping the CUDA runtime (build/libsnrt_cuda.a)" % why)
    return None, None


def cuda_link_flags(cuda_home, env=None):
    """(include flags, link flags) for the CUDA runtime: cuDNN/cuBLAS from
    CUDNN_HOME/CUBLAS_HOME (folders with include/ and lib/, e.g. PyTorch's pip
    wheels) before the toolkit's, each library folder with an rpath so that
    the program finds its libraries at run time without LD_LIBRARY_PATH."""
    env = os.environ if env is None else env
    inc, libdirs = "", []
    for d in (env.get("CUDNN_HOME"), env.get("CUBLAS_HOME")):
        if d:
            inc += " -I%s/include" % d
            libdirs.append(os.path.join(d, "lib"))
    libdirs.append(os.path.join(cuda_home, "lib64"))
    flags = []
    for d in dict.fromkeys(libdirs):  # in order, without repeats
        flags.append("-L{0} -Xlinker -rpath={0}".format(d))
    return inc, " ".join(flags) + " -lcudnn -lcublas -lcudart -lprotobuf-c -lz -lgomp -lpthread -lm"


def cuda_archs(nvcc):
    """The real architectures nvcc can build, from sm_75 on (numbers, sorted)."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-arch"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    archs = sorted({int(m) for m in re.findall(r"compute_(\d+)", out) if int(m) >= 75})
    return archs or [80, 90]  # an nvcc too old to list them: the two we know it has


def probe_dnnl(mode):
    """Whether the CPU runtime gets its oneDNN convolutions (k_conv_dnnl.c):
    the header at build time; the library itself is opened by the programs."""
    if mode == "off":
        return False
    have = os.path.exists("/usr/include/oneapi/dnnl/dnnl.h")
    if not have:
        if mode == "on":
            sys.exit("configure: error: --dnnl on, but /usr/include/oneapi/dnnl/dnnl.h is missing "
                     "(apt-get install libdnnl-dev)")
        print("configure: warning: no oneDNN header (libdnnl-dev); CPU convolutions use im2col only")
    return have


def probe_mpi():
    """(cflags, libs) of the C MPI library, from pkg-config (ompi-c, then mpi)
    or mpicc -showme; None where MPI is not installed."""
    for pkg in ("ompi-c", "mpi"):
        try:
            cf = subprocess.run(["pkg-config", "--cflags", pkg], capture_output=True, text=True)
            lf = subprocess.run(["pkg-config", "--libs", pkg], capture_output=True, text=True)
        except OSError:
            break
        if cf.returncode == 0 and lf.returncode == 0:
            return cf.stdout.strip(), lf.stdout.strip()
    mpicc = shutil.which("mpicc")
    if mpicc:
        cf = subprocess.run([mpicc, "-showme:compile"], capture_output=True, text=True)
        lf = subprocess.run([mpicc, "-showme:link"], capture_output=True, text=True)
        if cf.returncode == 0 and lf.returncode == 0:
            return cf.stdout.strip(), lf.stdout.strip()
    return None


def pytest_parallel(python):
    """pytest-xdist's flags for `ninja test`: one worker per core, each test
    file whole on one worker (a file's module fixtures are built once, and
    files that share a folder such as build-san/ never run side by side);
    none, with a warning, where xdist is not installed."""
    r = subprocess.run([python, "-c", "import xdist"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        print("configure: warning: pytest-xdist not found (apt-get install python3-pytest-xdist, "
              "or ./configure.py --install-test-deps): `ninja test` runs on one core")
        return ""
    return " -n auto --dist loadfile"


def cpu_flags():
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return ""
    if " avx2 " in info and " fma " in info:
        return "-mavx2 -mfma"
    return ""


def main():
    ap = argparse.ArgumentParser(description="Write build.ninja for snc.")
    ap.add_argument("--install-deps", action="store_true",
                    help="apt-get the Debian packages building and the main job need")
    ap.add_argument("--install-test-deps", action="store_true",
                    help="also the packages only the tests need (PyTorch, torchvision, ONNX, numpy, pytest, PIL, "
                         "Chromium; build/venv with transformers, onnx and onnxruntime from PyPI)")
    ap.add_argument("--cuda", choices=["auto", "on", "off"], default="auto",
                    help="build the CUDA runtime (auto: where nvcc and cuDNN are found)")
    ap.add_argument("--dnnl", choices=["auto", "on", "off"], default="auto",
                    help="run float32 CPU convolutions through oneDNN (libdnnl-dev; loaded by the "
                         "programs at run time, SNRT_CONV picks); auto: where its header is found")
    ap.add_argument("--sanitize", default="",
                    help="build snc and the CPU runtime with -fsanitize=LIST (e.g. address,undefined)")
    ap.add_argument("--werror", action="store_true", help="treat warnings as errors (the test build)")
    ap.add_argument("--cuda-arch", default="",
                    help="the CUDA architectures to build, e.g. 90 or 80,90 (SASS for each, PTX "
                         "of the last; default: every one nvcc lists from sm_75 on)")
    ap.add_argument("--builddir", default="build",
                    help="folder for objects and binaries (default build); a folder other than "
                         "build gets its own DIR/build.ninja (ninja -f DIR/build.ninja), e.g. a "
                         "sanitized second build beside the normal one")
    args = ap.parse_args()
    B = args.builddir.rstrip("/")
    if os.path.isabs(B) or B.startswith("..") or " " in B or "$" in B or ":" in B:
        sys.exit("configure: error: --builddir must be a relative folder inside the tree")

    if args.install_deps or args.install_test_deps:
        install(DEPS + (TEST_DEPS if args.install_test_deps else []))
    if args.install_test_deps:
        install_venv()

    os.chdir(ROOT)
    nvcc, cuda_home = probe_cuda(args.cuda)
    argv = " ".join(sys.argv[1:])
    argv = " ".join(a for a in sys.argv[1:] if not a.startswith("--install"))

    ninja_file = "build.ninja" if B == "build" else B + "/build.ninja"
    os.makedirs(B, exist_ok=True)
    w = Writer(ninja_file)
    w.comment("Written by configure.py %s; do not edit." % argv)
    w.variable("ninja_required_version", "1.10")
    w.variable("builddir", B)
    warn = "-Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter"
    if args.werror:
        warn += " -Werror"
    san = "-fsanitize=%s -fno-omit-frame-pointer" % args.sanitize if args.sanitize else ""
    w.variable("cc", os.environ.get("CC", "gcc"))
    w.variable("cflags", "-std=c11 -D_GNU_SOURCE -O2 -g %s %s -I$builddir/gen" % (warn, san))
    # -fno-trapping-math: the runtime never reads the floating-point exception
    # flags, and with them gcc will not turn a float compare into a vector
    # select (runtime/cpu/kern.h's kern_tanhf loop stays scalar). Values are
    # unchanged: no reassociation, no fast-math.
    dnnl = probe_dnnl(args.dnnl)
    w.variable("rtflags", "-std=c11 -D_GNU_SOURCE -O3 -g -fopenmp -fno-trapping-math %s %s %s%s "
               "-I$builddir/gen -Iruntime" % (cpu_flags(), warn, san, " -DSNRT_DNNL" if dnnl else ""))
    w.variable("ldflags", san)
    python = "/usr/bin/python3"
    w.variable("python", python)

    w.rule("configure", "./configure.py %s" % argv, "CONFIGURE", generator=True)
    w.rule("protoc", "protoc-c --c_out=$builddir/gen --proto_path=schemas $in", "PROTOC $in",
           restat=True)
    w.rule("cc", "$cc -MMD -MF $out.d $cflags -c $in -o $out", "CC $out", depfile="$out.d")
    w.rule("rtcc", "$cc -MMD -MF $out.d $rtflags -c $in -o $out", "CC $out", depfile="$out.d")
    w.rule("link", "$cc $ldflags -o $out $in $libs", "LINK $out")
    w.rule("ar", "rm -f $out && ar crs $out $in", "AR $out")
    w.rule("run", "$cmd", "$desc", pool="console")

    # Re-run when configure.py changes or a file is added to a source folder.
    watched = [d for d in ["compiler"] + COMPILER_STAGES + ["runtime/common", "runtime/cpu", "runtime/cuda", "runtime/dist",
                           "runtime/calibrate", "tests/unit"]
               if os.path.isdir(d)]
    w.build(ninja_file, "configure", implicit=["configure.py"] + watched)

    # ONNX schema, compiled by protoc-c.
    gen = w.build([B + "/gen/onnx.pb-c.c", B + "/gen/onnx.pb-c.h"], "protoc",
                  "schemas/onnx.proto")
    pb_obj = w.build(B + "/obj/onnx.pb-c.o", "cc", B + "/gen/onnx.pb-c.c")[0]

    # The compiler.
    objs = [pb_obj]
    for src in listdir("compiler", ".c") + [s for d in COMPILER_STAGES for s in listdir(d, ".c")]:
        objs += w.build(B + "/obj/%s.o" % src[:-2], "cc", src, order_only=gen)
    snc = w.build(B + "/snc", "link", objs, variables={"libs": "-lprotobuf-c -lz -lm"})
    snc_objs = [o for o in objs if not o.endswith("/main.o")]
    w.build(B + "/libsnc.a", "ar", snc_objs)

    # The CPU runtime.
    common = []
    for src in listdir("runtime/common", ".c"):
        common += w.build(B + "/obj/%s.o" % src[:-2], "rtcc", src, order_only=gen)
    rt = [pb_obj] + common
    for src in listdir("runtime/cpu", ".c"):
        rt += w.build(B + "/obj/%s.o" % src[:-2], "rtcc", src, order_only=gen)
    cpu_lib = w.build(B + "/libsnrt_cpu.a", "ar", rt)
    targets = snc + cpu_lib + [B + "/libsnc.a"]

    # snc-calibrate: times the runtime's own kernels, writes a device profile
    # (linked against the same library the emitted programs use).
    cal_obj = []
    for src in listdir("runtime/calibrate", ".c"):
        cal_obj += w.build(B + "/obj/%s.o" % src[:-2], "rtcc", src, order_only=gen)
    targets += w.build(B + "/snc-calibrate", "link", cal_obj + cpu_lib,
                       variables={"libs": "-fopenmp -lopenblas -lprotobuf-c -lz -lm -lpthread"})

    # The MPI layer of --dist programs: one object linked ahead of the runtime
    # library (it replaces dist_none.o there). snc compile --dist mpi copies
    # the link flags from build/snrt_mpi.ninja into DIR/build.ninja.
    mpi = probe_mpi()
    mpi_frag = os.path.join(B, "snrt_mpi.ninja")
    if mpi:
        w.variable("mpicflags", mpi[0])
        targets += w.build(B + "/snrt_mpi.o", "rtcc", "runtime/dist/mpi.c", order_only=gen,
                           variables={"rtflags": "$rtflags $mpicflags"})
        with open(mpi_frag, "w") as f:
            f.write("# Written by configure.py: how a --dist mpi program links against MPI\n")
            f.write("mpilibs = %s\n" % mpi[1])
    else:
        print("configure: warning: MPI not found (apt-get install openmpi-bin libopenmpi-dev): "
              "programs compiled with --dist mpi will not link")
        if os.path.exists(mpi_frag):
            os.remove(mpi_frag)

    # The CUDA runtime (compiled, never run, on machines without a GPU).
    cuda_srcs = listdir("runtime/cuda", ".cu") + listdir("runtime/cuda", ".c")
    if nvcc and cuda_srcs:
        w.variable("nvcc", nvcc)
        # A fat binary: SASS for every architecture this nvcc supports from
        # sm_75 (Turing) on, plus PTX of the newest, which later GPUs
        # JIT-compile (README "The CUDA target": which profiles can run).
        # -fmad=false: our kernels round each operation as the CPU's C11 does
        # (no contraction), so formulas both targets share give the same bits.
        # -Werror=all-warnings and -Xcompiler -Wall keep the CUDA runtime as
        # warning-clean as the C.
        werr = " -Werror=all-warnings" if args.werror else ""
        extra_inc, cudalibs = cuda_link_flags(cuda_home)
        archs = cuda_archs(nvcc)
        if args.cuda_arch:
            try:
                want = [int(a) for a in args.cuda_arch.split(",")]
            except ValueError:
                sys.exit("configure: error: --cuda-arch takes numbers like 90 or 80,90, not '%s'"
                         % args.cuda_arch)
            bad = [a for a in want if a not in archs]
            if bad:
                sys.exit("configure: error: --cuda-arch %s: nvcc builds %s" % (
                    ",".join(map(str, bad)), ",".join(map(str, archs))))
            archs = want
        gencode = " ".join("-gencode arch=compute_{0},code=sm_{0}".format(a) for a in archs)
        gencode += " -gencode arch=compute_{0},code=compute_{0}".format(archs[-1])
        w.variable("cuda_archs", " ".join("sm_%d" % a for a in archs))
        w.variable("nvccflags", "-O3 -std=c++17 -lineinfo -fmad=false -Iruntime -I$builddir/gen%s "
                   "-I%s/include %s -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter%s"
                   % (extra_inc, cuda_home, gencode, werr))
        # What a program linked with build/libsnrt_cuda.a needs (the emitter
        # and tests/test_cuda_build.py use the same list).
        w.variable("cudalibs", cudalibs)
        # The same, for the programs snc emits: snc compile --target cuda
        # copies these lines into DIR/build.ninja (compiler/emit/emit.c).
        with open(os.path.join(B, "snrt_cuda.ninja"), "w") as f:
            f.write("# Written by configure.py: how a program links against libsnrt_cuda.a\n")
            f.write("nvcc = %s\ncudalibs = %s\n" % (nvcc, cudalibs))
        w.rule("nvcc", "$nvcc -MD -MF $out.d $nvccflags -c $in -o $out", "NVCC $out",
               depfile="$out.d")
        cobjs = [pb_obj] + common
        for src in cuda_srcs:
            if src.endswith(".cu"):
                cobjs += w.build(B + "/obj/%s.o" % src[:-3], "nvcc", src, order_only=gen)
            else:
                cobjs += w.build(B + "/obj/%s.o" % src[:-2], "rtcc", src, order_only=gen)
        targets += w.build(B + "/libsnrt_cuda.a", "ar", cobjs)
        # The CUDA runtime's snc-calibrate (snc-calibrate --target cuda runs it).
        ccal = []
        for src in listdir("runtime/calibrate", ".c"):
            ccal += w.build(B + "/obj/%s_cuda.o" % src[:-2], "rtcc", src, order_only=gen,
                            variables={"rtflags": "$rtflags -DSNRT_CALIBRATE_CUDA"})
        w.rule("nvlink", "$nvcc -o $out $in $cudalibs", "NVLINK $out")
        targets += w.build(B + "/snc-calibrate-cuda", "nvlink", ccal + [B + "/libsnrt_cuda.a"])
        # --dist mpi on the CUDA target: NCCL (from the toolkit) for the
        # exchanges, bootstrapped by the MPI layer built without its own.
        nccl_lib = next((d for d in (os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib"))
                         if os.path.exists(os.path.join(d, "libnccl.so"))), None)
        if mpi and nccl_lib and os.path.exists(os.path.join(cuda_home, "include", "nccl.h")):
            targets += w.build(B + "/snrt_mpi_cuda.o", "rtcc", "runtime/dist/mpi.c", order_only=gen,
                               variables={"rtflags": "$rtflags $mpicflags -DSNRT_DEVICE_COMM"})
            targets += w.build(B + "/snrt_nccl.o", "nvcc", "runtime/dist/nccl.cu", order_only=gen)
            with open(mpi_frag, "a") as f:
                f.write("ncclmpilibs = %s -L%s -Xlinker -rpath=%s -lnccl\n" % (mpi[1], nccl_lib, nccl_lib))
        elif mpi:
            print("configure: warning: NCCL not found under %s: --dist mpi --target cuda programs "
                  "will not link" % cuda_home)

    # C unit tests: each tests/unit/test_X.c links against the compiler objects
    # (everything but main) and the CPU runtime.
    tests = []
    for src in listdir("tests/unit", ".c"):
        name = os.path.basename(src)[:-2]
        obj = w.build(B + "/obj/%s.o" % src[:-2], "rtcc", src, order_only=gen)
        tests += w.build(B + "/tests/%s" % name, "link", obj + [B + "/libsnc.a"] + cpu_lib,
                         variables={"libs": "-fopenmp -lopenblas -lprotobuf-c -lz -lm -lpthread"})
    w.build("tests", "phony", tests)

    w.build("test", "run", implicit=targets + tests,
            variables={"cmd": "$python -m pytest -q -p no:cacheprovider%s tests"
                       % pytest_parallel(python),
                       "desc": "TEST"})
    w.build("demo", "run", implicit=targets,
            variables={"cmd": "sh examples/demo.sh", "desc": "DEMO"})
    w.build("demo-gpt", "run", implicit=targets,
            variables={"cmd": "sh examples/demo_gpt.sh", "desc": "DEMO-GPT"})
    w.build("generated", "run", implicit=targets,
            variables={"cmd": "$python generated/regenerate.py", "desc": "GENERATED"})
    w.build("all", "phony", targets)
    w.default(targets)
    w.close()
    print("configure: wrote %s (cuda runtime: %s, mpi: %s)" % (ninja_file, "yes" if nvcc and cuda_srcs
                                                              else "no", "yes" if mpi else "no"))


if __name__ == "__main__":
    main()
