/// The protocol's framing in Python, for any socket: `send_on(s, message)`, `exactly_on(s, n)` and
/// `receive_on(s)` (a 4-byte big-endian length, then the JSON body). `pythonClientPrelude` builds on
/// it; a script with many connections (PeerLimitsTests) uses it alone.
public let pythonFraming = #"""
import json, socket, struct, sys
def send_on(s, m):
    body = json.dumps(m).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
def exactly_on(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk: raise EOFError
        data += chunk
    return data
def receive_on(s):
    return json.loads(exactly_on(s, struct.unpack(">I", exactly_on(s, 4))[0]))

"""#

/// The start of the Python protocol clients the tests run as nobody (a uid that cannot use the Swift client): connects to the
/// socket named by argv[1] (20 s timeout), with `send(message)`, `exactly(n)` and `receive()`
/// for frames. The scripts say `hello` themselves.
public let pythonClientPrelude = pythonFraming + #"""
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)
sock.connect(sys.argv[1])
def send(m): send_on(sock, m)
def exactly(n): return exactly_on(sock, n)
def receive(): return receive_on(sock)

"""#
