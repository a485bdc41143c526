"""make_failures.py — runs every failure a user can cause that we know of,
against build/snc and programs it compiles, and writes docs/failures.md: what
was tried, the message the user sees, and the exit code. Run after `ninja`:

    /usr/bin/python3 docs/make_failures.py
"""
import tempfile
import os, subprocess, signal, gzip, resource, shutil, sys, time
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
R=os.path.dirname(os.path.dirname(os.path.abspath(__file__))); SNC=R+"/build/snc"; FM="/usr/share/datasets/fashion-mnist"
T=tempfile.mkdtemp(prefix="snc-failures-"); os.chdir(T)
F=TensorProto.FLOAT
rows=[]
def show(s): 
    s=s.strip().replace(T+"/","").replace(R+"/","")
    return s
def rec(section, what, cmd, pre=None, cwd=None, shell=False):
    r=subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pre, cwd=cwd, shell=shell, timeout=300)
    err=r.stderr.strip().splitlines()
    msg=err[0] if len(err)<=1 else err[0]+" (then %d more lines: the usage text)"%(len(err)-1)
    if not err: msg=r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    rows.append((section, what, show(msg), r.returncode))
    print(section, "|", what, "|", show(msg), "|", r.returncode, flush=True)
def vi(n,s,dt=F): return helper.make_tensor_value_info(n,dt,s)
def save(p,nodes,ins,outs,inits=()):
    g=helper.make_graph(nodes,"g",ins,outs,list(inits)); onnx.save(helper.make_model(g,opset_imports=[helper.make_opsetid("",13)]),p); return p
W=numpy_helper.from_array(np.ones((4,4),np.float32),"W")
fc=helper.make_node("Gemm",["x","W"],["t"],transB=1,name="fc")
C="snc"
rec(C,"no command",[SNC])
rec(C,"unknown flag",[SNC,"plan","m.onnx","--frobnicate"])
rec(C,"bad --batch",[SNC,"plan",R+"/examples/fashion_cnn.onnx","--batch","0"])
rec(C,"bad --budget",[SNC,"plan",R+"/examples/fashion_cnn.onnx","--batch","8","--budget","lots"])
rec(C,"unknown device profile",[SNC,"plan",R+"/examples/fashion_cnn.onnx","--batch","8","--device","tpu9"])
rec(C,"missing model file",[SNC,"inspect","nope.onnx","--batch","1"])
os.makedirs("adir",exist_ok=True)
rec(C,"a folder as the model",[SNC,"inspect","adir","--batch","1"])
open("empty.onnx","wb").close(); rec(C,"empty file",[SNC,"inspect","empty.onnx","--batch","1"])
open("junk.onnx","wb").write(os.urandom(3000)); rec(C,"random bytes",[SNC,"inspect","junk.onnx","--batch","1"])
b=open(R+"/examples/fashion_cnn.onnx","rb").read(); open("trunc.onnx","wb").write(b[:len(b)//2]); rec(C,"truncated model",[SNC,"inspect","trunc.onnx","--batch","1"])
save("unsup.onnx",[fc,helper.make_node("Celu",["t"],["y"],name="celu1")],[vi("x",["N",4])],[vi("y",["N",4])],[W]); rec(C,"unsupported op",[SNC,"inspect","unsup.onnx","--batch","1"])
save("cycle.onnx",[fc,helper.make_node("Add",["t","z"],["z"],name="self"),helper.make_node("Relu",["z"],["y"],name="r")],[vi("x",["N",4])],[vi("y",["N",4])],[W]); rec(C,"cyclic graph",[SNC,"plan","cycle.onnx","--batch","2"])
save("dangling.onnx",[fc,helper.make_node("Add",["t","ghost"],["y"],name="adder")],[vi("x",["N",4])],[vi("y",["N",4])],[W]); rec(C,"input nobody produces",[SNC,"plan","dangling.onnx","--batch","2"])
t=TensorProto(); t.name="W"; t.data_type=F; t.dims.extend([1<<20,1<<20,1<<20]); t.raw_data=b""
save("absurd.onnx",[fc,helper.make_node("Relu",["t"],["y"],name="r")],[vi("x",["N",4])],[vi("y",["N",4])],[t]); rec(C,"absurd initializer dims",[SNC,"plan","absurd.onnx","--batch","2"])
save("big.onnx",[helper.make_node("Flatten",["x"],["f"],name="fl"),helper.make_node("Gemm",["f","W"],["y"],transB=1,name="fc")],[vi("x",["N",1<<16,1<<16]),vi("W",[4,1<<32])],[vi("y",["N",4])]); rec(C,"batch x dims over 2^48",[SNC,"plan","big.onnx","--batch","131072"])
save("perm.onnx",[helper.make_node("Transpose",["x"],["u"],name="tr",perm=list(range(1000000))),helper.make_node("Gemm",["u","W"],["y"],transB=1,name="fc")],[vi("x",["N",4])],[vi("y",["N",4])],[W]); rec(C,"1,000,000-entry attribute",[SNC,"plan","perm.onnx","--batch","2"])
n=helper.make_node("Relu",["t"],["y"],name="r")
for i in range(5000): n.attribute.append(helper.make_attribute("a%d"%i,i))
save("many.onnx",[fc,n],[vi("x",["N",4])],[vi("y",["N",4])],[W]); rec(C,"5,000 attributes on a node",[SNC,"plan","many.onnx","--batch","2"])
e=TensorProto(); e.name="W"; e.data_type=F; e.dims.extend([4,4]); e.data_location=TensorProto.EXTERNAL
kv=e.external_data.add(); kv.key="location"; kv.value="../../etc/passwd"
save("ext.onnx",[fc,helper.make_node("Relu",["t"],["y"],name="r")],[vi("x",["N",4])],[vi("y",["N",4])],[e]); rec(C,"external data outside the model folder",[SNC,"plan","ext.onnx","--batch","2"])
save("conv3d.onnx",[helper.make_node("Conv",["x","Wc"],["y"],name="c",kernel_shape=[3,3])],[vi("x",["N",1,8,8]),vi("Wc",[4,1,3,3])],[vi("y",["N",4,6,6])]); rec(C,"softmax-ce on a 4-D output",[SNC,"plan","conv3d.onnx","--batch","2"])
save("noparam.onnx",[helper.make_node("Relu",["x"],["y"],name="r")],[vi("x",["N",4])],[vi("y",["N",4])])
rec(C,"infeasible --budget",[SNC,"plan",R+"/examples/fashion_cnn.onnx","--batch","64","--budget","1MiB"])
rec(C,"output folder not writable",[SNC,"compile",R+"/examples/fashion_cnn.onnx","-o","/proc/nope","--batch","8"])
rec(C,"--json to an unwritable path",[SNC,"plan",R+"/examples/fashion_cnn.onnx","--batch","8","--json","/proc/x.json"])
# ---- program
P="train"
def comp(d,batch,model=R+"/examples/fashion_cnn.onnx"):
    subprocess.run([SNC,"compile",model,"-o",d,"--batch",str(batch)],check=True,stdout=subprocess.DEVNULL)
    subprocess.run(["ninja","-C",d],check=True,stdout=subprocess.DEVNULL)
    return d+"/train"
exe=comp(T+"/fc",16); exe32=comp(T+"/fc32",32)
subprocess.run(["/usr/bin/python3",R+"/examples/make_resnet.py","--blocks","1,1,1,1","--size","28","--classes","10","-o",T+"/rn.onnx"],check=True,stdout=subprocess.DEVNULL)
x=np.random.default_rng(0).integers(0,256,(64,28,28),dtype=np.uint8); y=np.arange(64)%10
np.save("x.npy",x); np.save("y.npy",y); D="npy:%s/x.npy,%s/y.npy"%(T,T)
def prog(what,*args,pre=None,e=None): rec(P,what,[e or exe,"--threads","1"]+[str(a) for a in args],pre=pre)
subprocess.run([SNC,"compile","noparam.onnx","-o",T+"/np","--batch","2","--loss","mse"],check=True,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
subprocess.run(["ninja","-C",T+"/np"],check=True,stdout=subprocess.DEVNULL)
prog("training a model with nothing to train (it compiles, with a note)","--steps","1",e=T+"/np/train")
prog("unknown flag","--bogus")
prog("bad number","--steps","ten")
prog("missing data file","--data","idx:%s/nope.gz,%s/nope-labels.gz"%(T,T))
g=open(FM+"/t10k-images-idx3-ubyte.gz","rb").read(); open("short.gz","wb").write(g[:len(g)//2])
prog("truncated .gz images","--data","idx:%s/short.gz,%s/t10k-labels-idx1-ubyte.gz"%(T,FM))
raw=gzip.open(FM+"/t10k-images-idx3-ubyte.gz").read(); open("short-idx","wb").write(raw[:50000])
prog("truncated raw IDX images","--data","idx:%s/short-idx,%s/t10k-labels-idx1-ubyte.gz"%(T,FM))
bad=y.astype(np.int32).copy(); bad[17]=10; np.save("bad.npy",bad)
prog("label out of range","--data","npy:%s/x.npy,%s/bad.npy"%(T,T))
np.save("x32.npy",np.zeros((64,32,32),np.float32)); prog("images of the wrong size","--data","npy:%s/x32.npy,%s/y.npy"%(T,T))
np.save("y50.npy",y[:50]); prog("fewer labels than images","--data","npy:%s/x.npy,%s/y50.npy"%(T,T))
ck=T+"/ck"; subprocess.run([exe,"--threads","1","--data",D,"--steps","2","--save",ck],check=True,stdout=subprocess.DEVNULL)
good=open(ck,"rb").read()
prog("checkpoint of another batch size","--data",D,"--resume",ck,e=exe32)
# another model
import shutil
fcs=T+"/fcsgd"; subprocess.run([SNC,"compile",R+"/examples/fashion_cnn.onnx","-o",fcs,"--batch","16","--optimizer","adam"],check=True,stdout=subprocess.DEVNULL); subprocess.run(["ninja","-C",fcs],check=True,stdout=subprocess.DEVNULL)
prog("checkpoint of another optimizer (Adam build)","--data",D,"--resume",ck,e=fcs+"/train")
fl=bytearray(good); fl[len(good)//2]^=0x10; open("flip","wb").write(bytes(fl)); prog("corrupted checkpoint (1 bit)","--data",D,"--resume",T+"/flip")
open("ck-trunc","wb").write(good[:-100]); prog("truncated checkpoint","--data",D,"--resume",T+"/ck-trunc")
open("notck","wb").write(b"hello"*20); prog("not a checkpoint","--data",D,"--resume",T+"/notck")
prog("missing checkpoint","--data",D,"--resume",T+"/nock")
os.symlink("/dev/full",ck+".tmp"); prog("disk full while saving (old checkpoint kept)","--data",D,"--steps","1","--save",ck)
if os.path.lexists(ck+".tmp"): os.unlink(ck+".tmp")
assert open(ck,"rb").read()==good
prog("loss becomes NaN/Inf (--lr 1e30)","--data",D,"--steps","50","--lr","1e30","--resume",ck,"--save",ck)
assert open(ck,"rb").read()==good
def lim(): resource.setrlimit(resource.RLIMIT_AS,(1<<30,1<<30))
bigd=T+"/big"; subprocess.run([SNC,"compile",R+"/examples/fashion_cnn.onnx","-o",bigd,"--batch","8192"],check=True,stdout=subprocess.DEVNULL); subprocess.run(["ninja","-C",bigd],check=True,stdout=subprocess.DEVNULL)
prog("arena cannot be allocated (1 GiB address-space limit, batch 8192)","--steps","1",pre=lim,e=bigd+"/train")
os.rename(T+"/fc/params.bin",T+"/fc/params.bin.x"); prog("params.bin missing","--steps","1"); os.rename(T+"/fc/params.bin.x",T+"/fc/params.bin")
prog("--export-onnx to an unwritable path","--data",D,"--steps","1","--export-onnx","/proc/x.onnx")
prog("--metrics to an unwritable path","--data",D,"--steps","1","--metrics","/proc/m.json")
# token data (the byte-level GPT example)
gx=comp(T+"/gpt",16,R+"/examples/gpt_bytes.onnx")
import struct
def llmc(name,ntok,version=1,count=None,extra=b""):
    h=[0]*256; h[0],h[1],h[2]=20240520,version,ntok if count is None else count
    open(name,"wb").write(struct.pack("<256i",*h)+(np.arange(ntok)%256).astype("<u2").tobytes()+extra)
llmc("tok-v7.bin",2000,version=7); prog("token file: unknown version","--data","tokens:%s/tok-v7.bin"%T,e=gx)
llmc("tok-odd.bin",2000,extra=b"x"); prog("token file: odd byte count","--data","tokens:%s/tok-odd.bin"%T,e=gx)
llmc("tok-count.bin",2000,count=3000); prog("token file: header count does not match","--data","tokens:%s/tok-count.bin"%T,e=gx)
h=[0]*256; h[0],h[1],h[2]=20240520,1,1200; open("tok-big.bin","wb").write(struct.pack("<256i",*h)+np.full(1200,300,dtype="<u2").tobytes())
prog("token id outside the vocabulary (300 of 256)","--data","tokens:%s/tok-big.bin"%T,e=gx)
open("tiny.txt","wb").write(b"too short"); prog("text shorter than one window","--data","tokens:%s/tiny.txt"%T,e=gx)
np.save("ids.npy",np.zeros((32,65),np.int64)); np.save("tg.npy",np.zeros((32,64),np.int64))
prog("npy token ids of the wrong length","--data","npy:%s/ids.npy,%s/tg.npy"%(T,T),e=gx)
prog("--generate on an image model","--generate","10")
# SIGTERM
p=subprocess.Popen([exe,"--threads","1","--data",D,"--steps","1000000","--log-every","1","--save",T+"/ck2"],stdout=subprocess.PIPE,stderr=subprocess.PIPE,text=True)
n=0
for line in p.stdout:
    if "step " in line:
        n+=1
        if n==3: p.send_signal(signal.SIGTERM); break
out,err=p.communicate(timeout=60)
last=[l for l in out.splitlines() if "SIGTERM" in l]
rows.append((P,"SIGTERM during training with --save",show(last[0] if last else err),p.returncode)); print(rows[-1])
HEAD = """# Failures and what the user sees

Every failure below was run for real by `docs/make_failures.py` (which writes
this page) against `build/snc` and programs it compiled from
`examples/fashion_cnn.onnx`; the message is the program's whole stderr unless
noted. Exit codes are docs/reference.md's: snc 1 usage, 2 bad input, 3 internal
error (never expected); the program 1 usage, 2 bad data/file/checkpoint,
3 loss NaN/Inf, 4 device or memory error. Usage errors (exit 1) print the
one error line followed by the usage text.

"""
with open(os.path.join(R, "docs", "failures.md"), "w") as f:
    f.write(HEAD)
    for sec, title in (("snc", "## The compiler (snc)"), ("train", "## The emitted program (DIR/train)")):
        f.write(title + "\n\n| failure tried | what the user sees | exit |\n|---|---|---|\n")
        for s_, what, msg, rc in rows:
            if s_ == sec:
                f.write("| %s | `` %s `` | %d |\n" % (what, msg.replace("|", "\\|"), rc))
        f.write("\n")
shutil.rmtree(T, ignore_errors=True)
