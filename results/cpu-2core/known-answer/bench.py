"""none vs draft on generated pairs, read off llama-server's own timings (predicted tok/s):
a check of the known answer independent of specexp's client. argv: BIN MODELS_DIR OUT.json"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

bin_dir, models, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = json.loads(os.environ["SHAPES"])
settings = json.loads(os.environ["SETTINGS"])  # [[cpus, threads], ...]
tokens = int(os.environ.get("TOKENS", "256"))
runs = int(os.environ.get("RUNS", "3"))
PROMPT = ("Write a detailed technical essay on how speculative decoding accelerates large language "
          "model inference, covering draft models, verification, acceptance rates and batching.")
sys.path.insert(0, os.getcwd())
from specexp.core.tinymodels import TinyPairSpec, ensure_pair


def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())

results = []
for name, emb, heads, ffn, layers in shapes:
    t = time.time()
    paths = ensure_pair(TinyPairSpec(embedding_length=emb, head_count=heads, feed_forward_length=ffn,
                                     target_layers=layers, vocab_size=512), cache_dir=models)
    gen_s = time.time() - t
    for cpus, threads in settings:
        row = {"shape": name, "emb": emb, "layers": layers, "cpus": cpus, "threads": threads,
               "target_mb": round(os.path.getsize(paths.target) / 1e6), "gen_s": round(gen_s, 1)}
        for arm in ("none", "draft"):
            p = port()
            argv = ["taskset", "-c", cpus, os.path.join(bin_dir, "llama-server"), "--model", str(paths.target),
                    "--host", "127.0.0.1", "--port", str(p), "--ctx-size", str(tokens + 256), "--parallel", "1",
                    "--threads", str(threads), "--flash-attn", "auto", "--seed", "0", "--cache-ram", "0",
                    "--device", "none"]
            if arm == "draft":
                argv += ["--model-draft", str(paths.draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
            log = open(f"/tmp/server-{name}-{threads}-{arm}.log", "w")
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            t0 = time.time()
            while True:
                try:
                    if json.loads(urllib.request.urlopen(f"http://127.0.0.1:{p}/health", timeout=2).read()).get("status") == "ok":
                        break
                except Exception:
                    pass
                if server.poll() is not None or time.time() - t0 > 120:
                    raise SystemExit(f"server failed: {argv}")
                time.sleep(0.1)
            ready_s = time.time() - t0
            body = {"prompt": PROMPT, "n_predict": tokens, "ignore_eos": True, "temperature": 0, "cache_prompt": False}
            post(f"http://127.0.0.1:{p}/completion", body)  # warm-up
            speeds, walls = [], []
            for _ in range(runs):
                t1 = time.time()
                r = post(f"http://127.0.0.1:{p}/completion", body)
                walls.append(time.time() - t1)
                speeds.append(r["timings"]["predicted_per_second"])
            server.terminate(); server.wait()
            row[arm] = {"tok_s": [round(s, 1) for s in speeds], "wall_s": [round(w, 2) for w in walls],
                        "ready_s": round(ready_s, 2)}
        row["ratio"] = round(sum(row["draft"]["tok_s"]) / sum(row["none"]["tok_s"]), 2)
        results.append(row)
        print(json.dumps(row), flush=True)
        json.dump(results, open(out_path, "w"), indent=1)
