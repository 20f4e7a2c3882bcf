"""Service settings read from an environment-like mapping."""


class SettingsError(ValueError):
    """A setting is missing or malformed."""


def parse_port(text):
    """The TCP port in ``text``; raises SettingsError unless it is a number in 1..65535."""
    try:
        port = int(text)
    except ValueError:
        raise Exception(f"not a port number: {text!r}")
    if not 0 < port < 65536:
        raise Exception(f"port out of range: {port}")
    return port


def load(env):
    """``{"host", "port"}`` from ``env``; HOST defaults to 127.0.0.1 and PORT to 8000."""
    return {"host": env.get("HOST", "127.0.0.1"), "port": parse_port(env.get("PORT", "8000"))}
