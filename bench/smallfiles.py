# The smallfiles workload of `make bench` (bench/run.sh) and `coordfs-bench floor`: create (100 B,
# O_CREAT | O_EXCL, one write, close), then stat, then unlink N files in a new folder ROOT; prints
# files per second over the three loops.   python3 bench/smallfiles.py ROOT N
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
os.mkdir(root)
data = b"x" * 100
t = time.perf_counter()
for i in range(n):
    fd = os.open(f"{root}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)
for i in range(n):
    os.stat(f"{root}/f{i}")
for i in range(n):
    os.unlink(f"{root}/f{i}")
elapsed = time.perf_counter() - t
os.rmdir(root)
print(f"{n / elapsed:.1f}")
