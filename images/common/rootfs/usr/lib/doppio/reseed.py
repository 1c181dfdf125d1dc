# Credits the per-clone seed to the kernel RNG and forces a CRNG reseed. Clones restored
# from one golden snapshot share the golden's RNG state; without this, keys generated
# right after a restore (SSH host keys) could be identical between clones.
import fcntl
import hashlib
import struct
import sys

RNDADDENTROPY = 0x40085203
RNDRESEEDCRNG = 0x5207
seed = sys.argv[1].encode()
data = hashlib.sha512(b"doppio-seed:" + seed).digest()
with open("/dev/urandom", "wb") as f:
    fcntl.ioctl(f, RNDADDENTROPY, struct.pack("ii", len(data) * 8, len(data)) + data)
    try:
        fcntl.ioctl(f, RNDRESEEDCRNG)
    except OSError:
        pass
