enum _PlaceholderStorage {}
