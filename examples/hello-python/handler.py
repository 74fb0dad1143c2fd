"""A hello-world function: invoke it with {"name": "..."} as the body."""


def handle(event, context):
    name = (event or {}).get("name", "world") if isinstance(event, dict) else "world"
    return {"message": f"Hello, {name}!"}
