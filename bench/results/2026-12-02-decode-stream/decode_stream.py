"""ResNet-18 from JPEG with nvJPEG on a stream of its own (Note [Decoding waits on the host]):
the synthetic figure, fixed GPU decode shares (settled images/s, nvJPEG's host time per
batch, the GPU's wait for input), then the adaptive share (bench_gpu.py's hybrid phase)."""
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "bundle", "bin"))
import bench_gpu as b

out = sys.argv[1]
shares = [float(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0.25, 0.375, 0.5, 0.625]
os.makedirs(out, exist_ok=True)
root = b.dataset(12000)
b.stoker_train(out, "synthetic_resnet18_1gpu", 1, "resnet18", synthetic_steps=b.SYNTHETIC_STEPS,
               cores=b.CORES_1GPU)
for share in shares:
    name = f"fixed_share{share}"
    r = b.stoker_train(out, name, 1, "resnet18", root=root, cores=b.CORES_1GPU, epochs=6, quiet=True,
                       extra=(f"--gpu_decode_share={share}",), jsonl=name + ".jsonl")
    b.log(f"share {share}: {r.get('images_per_second')} images/s, settled {r.get('settled_images_per_second')}; "
          f"nvJPEG {r.get('nvjpeg_host_ms_per_batch')} ms per batch; data wait {r.get('data_wait_share')}, "
          f"GPU wait {r.get('gpu_input_wait_share')}")
    b.record(out, **r)
if os.environ.get("DECODE_STREAM_AUTO", "1") == "1":
    b.phase_hybrid(out, shares=("auto",))
