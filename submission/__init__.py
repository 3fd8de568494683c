"""Order intake: the Service Bus trigger on ``orders`` and the plain code behind it."""
