/// The start of the Python protocol clients the tests run as nobody (a uid that cannot use the Swift client): connects to the
/// socket named by argv[1] (20 s timeout), with `send(message)`, `exactly(n)` and `receive()`
/// for frames. The scripts say `hello` themselves.
public let pythonClientPrelude = #"""
import json, socket, struct, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)
sock.connect(sys.argv[1])
def send(m):
    body = json.dumps(m).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)
def exactly(n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk: raise EOFError
        data += chunk
    return data
def receive():
    return json.loads(exactly(struct.unpack(">I", exactly(4))[0]))

"""#
