// Run in the task's own page (the document the environment loaded) after every action.
// The first state with done = true is kept: a wrong address submitted first stays a 0.
() => {
  const got = document.body.dataset.subscribed || null;
  return {done: got !== null, reward: got === "ada@example.org" ? 1 : 0, raw: got, reason: null};
}
