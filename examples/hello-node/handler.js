// A hello-world function: invoke it with {"name": "..."} as the body.
exports.handle = async (event, context) => {
  const name = (event && typeof event === "object" && event.name) || "world";
  return { message: `Hello, ${name}!` };
};
