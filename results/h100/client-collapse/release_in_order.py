"""Every slot of a llama-server released in id order: a 1-token request pinned to each, one after
another (what specexp's client now sends before each run); its LRU choice then hands out 0, 1, 2..."""

import json
import sys
import urllib.request

url, slots = sys.argv[1], int(sys.argv[2])
for i in range(slots):
    body = json.dumps({"prompt": "a", "n_predict": 1, "id_slot": i, "cache_prompt": False}).encode()
    urllib.request.urlopen(
        urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    ).read()
