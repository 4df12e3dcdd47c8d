# The reference solution (`openforge tasks check`): it runs with the browser up and does
# what an agent would, through the environment's own actions.
python3 - <<'PY'
import json, os, urllib.request

url = os.environ["OPENFORGE_BROWSER_URL"]


def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


elements = call("/observation?mode=axtree")["elements"]
field = next(e["id"] for e in elements if e["role"] == "textbox")
button = next(e["id"] for e in elements if e["name"] == "Subscribe")
call("/action", {"action": "type", "id": field, "text": "ada@example.org"})
print(call("/action", {"action": "click", "id": button}))
PY
