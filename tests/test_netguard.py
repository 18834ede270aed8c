import socket
import subprocess
import sys

import pytest

from memlab.core import netguard


def test_offline_mode_refuses_remote_but_allows_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    netguard.install()
    try:
        with pytest.raises(ConnectionRefusedError, match="offline mode"):
            socket.socket().connect(("10.255.255.1", 80))
        with pytest.raises(ConnectionRefusedError):
            socket.socket().connect(("example.org", 443))
        c = socket.socket()
        c.connect(server.getsockname())  # loopback is fine
        c.close()
    finally:
        netguard.uninstall()
        server.close()


def test_env_variable_installs_guard_on_import():
    code = (
        "import socket, memlab\n"
        "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "except ConnectionRefusedError as e:\n    print('refused', 'offline mode' in str(e))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={"MEMLAB_OFFLINE": "1", "PATH": ""},
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "refused True", out.stderr
